"""A session whose client stops reading (docs/editors.md): over a real socket, its notifications
are dropped past the bound while answers still go, and once it drains it gets one fresh snapshot."""

from __future__ import annotations

import asyncio
import socket
import threading

from flowd.server.sessions import HIGH_WATER, SessionWriter


async def test_a_stuck_client_loses_notifications_then_gets_a_snapshot_once_it_reads() -> None:
    ours, theirs = socket.socketpair()
    _reader, writer = await asyncio.open_unix_connection(sock=ours)
    resynced = asyncio.Event()
    loop = asyncio.get_running_loop()
    session = SessionWriter(writer, lambda: loop.call_soon(resynced.set))
    note = b"n" * (64 << 10)
    session.notification = True
    for _ in range(3 * HIGH_WATER // len(note)):  # three times the bound, to a client that reads nothing
        session.write(note)
    assert session.behind
    queued = writer.transport.get_write_buffer_size()
    assert queued <= HIGH_WATER + len(note)  # bounded: the rest was dropped, not queued
    session.notification = False
    session.write(b"ANSWER")  # an answer is never dropped
    assert writer.transport.get_write_buffer_size() == queued + len(b"ANSWER")
    received = bytearray()

    def drain() -> None:  # the client reads again
        theirs.settimeout(10)
        while not received.endswith(b"ANSWER"):
            received.extend(theirs.recv(1 << 20))

    reading = threading.Thread(target=drain)
    reading.start()
    await asyncio.wait_for(resynced.wait(), 30)
    reading.join(30)
    assert not session.behind and received.endswith(b"ANSWER")
    assert len(received) < 3 * HIGH_WATER // 2  # what it got is the bounded part, not the backlog
    session.close()
    theirs.close()
