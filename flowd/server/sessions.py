"""A daemon session's writer, bounded: a client that stops reading never stalls the others.

Past `HIGH_WATER` bytes queued for a session its notifications are dropped (answers never are);
once its queue drains below `LOW_WATER` the session is sent a fresh snapshot of every live run and
its diagnostics, not the backlog (docs/editors.md, "One daemon per repository").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)

HIGH_WATER = 4 << 20
LOW_WATER = 256 << 10


class SessionWriter:
    """pygls' writer interface over a session's stream (SessionProtocol says which messages are
    notifications)."""

    def __init__(self, writer: asyncio.StreamWriter, resync: Any) -> None:
        self._writer = writer
        self._resync = resync
        self.notification = False  # set by SessionProtocol before each message
        self.behind = False
        self.closed = False

    def write(self, data: bytes) -> None:
        if self.closed or self._writer.is_closing():
            return
        if self.notification and (self.behind or self._queued() > HIGH_WATER):
            if not self.behind:
                self.behind = True
                log.warning("a session fell behind; its notifications wait for a fresh snapshot")
                asyncio.get_running_loop().call_later(0.1, self._drained)
            return
        self._writer.write(data)

    def _queued(self) -> int:
        return int(self._writer.transport.get_write_buffer_size())

    def _drained(self) -> None:
        if self.closed:
            return
        if self._queued() > LOW_WATER:
            asyncio.get_running_loop().call_later(0.1, self._drained)
            return
        self.behind = False
        self._resync()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self._writer.close()
