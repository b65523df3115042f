"""`flowd serve`: the editor's language server.

Over stdio (as editors start it) it is a forwarder to the repository's daemon, which it starts when
none runs (flowd/daemon/forward.py, flowd/server/daemon.py); `--no-daemon`, a workspace outside a
git repository, or a daemon that cannot start serve the one session in-process, as before the
daemon. `--tcp` serves one token-gated session on the loopback interface (docs/protocol.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import Any, BinaryIO

from flowd.base.errors import InputError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
NO_DAEMON_ENV = "FLOWD_NO_DAEMON"  # set (to 1): `flowd serve` serves in-process, as --no-daemon


def _logging() -> None:
    import logging  # not at the top: the forwarder's start imports no logging unless FLOWD_LOG asks

    # stdout is the protocol channel: every log line goes to stderr.
    level = os.environ.get("FLOWD_LOG", "WARNING").upper()
    logging.basicConfig(
        stream=sys.stderr, level=level, format="flowd serve %(levelname)s %(name)s: %(message)s"
    )
    # pygls logs every message body at INFO; keep it quiet unless asked.
    for noisy in ("pygls", "watchfiles"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def serve_command(args: argparse.Namespace) -> int:
    tcp = bool(getattr(args, "tcp", False))
    host = str(getattr(args, "host", "127.0.0.1") or "127.0.0.1")
    port = int(getattr(args, "port", 2087))
    if tcp and host not in LOOPBACK:
        raise InputError(
            f"--host {host}: flowd serve listens on the loopback interface only (127.0.0.1); "
            "it controls agents that change your repository, so it is never exposed to the network"
        )
    no_daemon = bool(getattr(args, "no_daemon", False)) or os.environ.get(NO_DAEMON_ENV) == "1"
    if not tcp and not no_daemon:
        from flowd.daemon.forward import Fallback, Forwarder

        if os.environ.get("FLOWD_LOG"):  # the forwarder logs only below WARNING
            _logging()
        outcome = Forwarder(sys.stdin.buffer, sys.stdout.buffer).run()
        if not isinstance(outcome, Fallback):
            # A thread may still block on the editor's input: leave without the interpreter's
            # shutdown, which would wait on it (everything sent is flushed).
            sys.stdout.flush()
            os._exit(outcome)
        _logging()
        return _in_process(outcome.buffered, outcome.why)
    _logging()
    return _in_process(b"", None, tcp=tcp, host=host, port=port)


def _in_process(buffered: bytes, why: str | None, *, tcp: bool = False, host: str = "", port: int = 0) -> int:
    from flowd.server.setup import build_server

    server = build_server()
    try:
        if tcp:
            from flowd.server.tcp import serve_tcp

            # Token-gated (docs/protocol.md); says "Serving on (host, port)" on stderr once it listens.
            serve_tcp(server, "::1" if host == "::1" else "127.0.0.1", port)
        elif buffered:
            _serve_stdio(server, buffered, why)
        else:
            server.start_io()
    finally:
        server.stop()
    return 0


class _Buffered:
    """stdin, after the bytes the forwarder already read (the editor's `initialize`)."""

    def __init__(self, first: bytes, stdin: BinaryIO) -> None:
        self._first = first
        self._stdin = stdin
        self._lock = threading.Lock()

    def readline(self) -> bytes:
        with self._lock:
            if self._first:
                line, sep, rest = self._first.partition(b"\n")
                self._first = rest
                return line + sep
        return self._stdin.readline()

    def read(self, n: int) -> bytes:
        with self._lock:
            if self._first:
                head, self._first = self._first[:n], self._first[n:]
                return head + (self._stdin.read(n - len(head)) if len(head) < n else b"")
        return self._stdin.read(n)


def _serve_stdio(server: Any, buffered: bytes, why: str | None) -> None:
    """pygls' `start_io`, reading the already-read bytes first; `why` shown to the user once."""
    from lsprotocol import types as lsp
    from pygls.io_ import StdoutWriter

    if why:
        server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
        server.window_show_message(
            lsp.ShowMessageParams(
                type=lsp.MessageType.Warning, message=f"{why}; serving this editor by itself"
            )
        )
    server.start_io(stdin=_Buffered(buffered, sys.stdin.buffer))
