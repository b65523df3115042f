"""Watches of active story worktrees: each batch of changes triggers a rescan of that story.

The rescan (what changed against the story's base, classified against its perimeter) is the
caller's; this module only owns the watch tasks so that a lane leaving `active`, a run ending or
the server stopping ends its watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from watchfiles import DefaultFilter, awatch

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (runId, lane)
Rescan = Callable[[], Awaitable[None]]

# Agents write in bursts: group them briefly, but stay well under a human's notice.
DEBOUNCE_MS = 60
STEP_MS = 10


class WorktreeWatches:
    def __init__(self) -> None:
        self._watches: dict[Key, tuple[asyncio.Task[None], asyncio.Event]] = {}
        # Once stopped, no new watch may start: an unstopped watch thread would hold the exit.
        self._closed = False

    def __contains__(self, key: Key) -> bool:
        return key in self._watches

    def start(self, key: Key, worktree: Path, rescan: Rescan) -> None:
        if self._closed or key in self._watches or not worktree.is_dir():
            return
        stop = asyncio.Event()
        task = asyncio.ensure_future(self._run(worktree, rescan, stop))
        task.add_done_callback(self._done)
        self._watches[key] = (task, stop)

    def stop(self, key: Key) -> None:
        entry = self._watches.pop(key, None)
        if entry is not None:
            entry[1].set()

    def stop_run(self, run_id: str) -> None:
        for key in [k for k in self._watches if k[0] == run_id]:
            self.stop(key)

    def stop_all(self) -> None:
        self._closed = True
        for key in list(self._watches):
            self.stop(key)

    @staticmethod
    async def _run(worktree: Path, rescan: Rescan, stop: asyncio.Event) -> None:
        await rescan()
        watch_filter = DefaultFilter(ignore_dirs=(*DefaultFilter.ignore_dirs, ".flow"))
        with contextlib.suppress(FileNotFoundError):
            async for _ in awatch(
                worktree, stop_event=stop, debounce=DEBOUNCE_MS, step=STEP_MS, watch_filter=watch_filter
            ):
                await rescan()

    @staticmethod
    def _done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("worktree watch failed: %s", task.exception())
