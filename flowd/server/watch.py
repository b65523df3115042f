"""Watches of running stories' worktrees: each batch of changes triggers a rescan of that story.

A watch starts as soon as a lane is active, before its worktree exists: a story's first attempt
announces `active` and only then creates its worktree and state file. Until the worktree is
there, the watch waits on the places it will appear (the story's state file, the worktree's
parent), so a stray write in the very first seconds of a story is seen. A worktree whose checkout
is still being written (its files come after it appears) is watched once git has written its
index. A worktree deleted by hand ends its file watch; the watch rescans (which clears the
story's diagnostics) and waits for the worktree to come back.

The rescan (what changed against the story's base, classified against its perimeter) is the
caller's; this module owns the watch tasks so that a lane leaving `active`, a run ending or the
server stopping ends its watches.

A worktree that inotify cannot watch whole (too few watches left, flowd/server/inotify.py) is
polled instead, from then on, and the caller hears it once per watch (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from watchfiles import Change, DefaultFilter, awatch

from flowd.server import inotify
from flowd.vcs.changes import merge_in_progress
from flowd.vcs.gitcli import unchecked_out

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (runId, lane)
Rescan = Callable[[], Awaitable[None]]
# Where the story's worktree is, once it exists as a directory; None before.
Locate = Callable[[], Path | None]
# Paths whose appearance may reveal the worktree (its state file, its expected directory).
Anchors = Callable[[], list[Path]]
# Told once per watch, with the sentence to show, when a worktree is polled instead of watched.
Polled = Callable[[Key, str], None]

# Agents write in bursts: group them briefly, but stay well under a human's notice.
DEBOUNCE_MS = 60
STEP_MS = 10
# A safety net for a creation the kernel reported before the watch was in place: look again.
APPEAR_RECHECK_S = 1.0
# git writes a merge's files into the worktree first and moves HEAD (outside the worktree, so no
# event) last: a scan in between blames the story for what the catch-up brings in. Scans wait
# while a merge is in progress, and each batch gets one more scan once HEAD has had time to move.
SETTLE_S = 0.5
MERGE_WAIT_S = 30.0
# How often a worktree whose checkout is still being written is looked at again (`until_checked_out`).
CHECKOUT_POLL_S = 0.05
# While watched live, a batch that adds directories may have run the user out of watches (notify
# then drops the error): look at the budget again, at most this often.
RECHECK_S = 2.0


async def settled(worktree: Path, stop: asyncio.Event) -> None:
    """Return once no merge is in progress in `worktree` (or after MERGE_WAIT_S, or on stop)."""
    waited = 0.0
    while (
        not stop.is_set() and waited < MERGE_WAIT_S and await asyncio.to_thread(merge_in_progress, worktree)
    ):
        await asyncio.sleep(STEP_MS / 1000)
        waited += STEP_MS / 1000


async def until_checked_out(worktree: Path, stop: asyncio.Event) -> bool:
    """Return True once `worktree`'s checkout has ended (git wrote its index), False when it went
    or the watch stops first. A story's files are written after its worktree appears
    (docs/repositories.md "Worktree reuse"): counting its directories for the watch budget before
    then finds too few, and the directories the checkout adds later would run the watches out
    unnoticed. Nothing in it counts as a change before (flowd/engine/perimeter_now.py), and the
    watch scans once more when it is in place."""
    while await asyncio.to_thread(unchecked_out, worktree):
        if stop.is_set() or not worktree.is_dir():
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), CHECKOUT_POLL_S)
    return not stop.is_set() and worktree.is_dir()


def nearest_existing(path: Path) -> Path | None:
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return None


class WorktreeWatches:
    def __init__(self, polled: Polled | None = None) -> None:
        self._watches: dict[Key, tuple[asyncio.Task[None], asyncio.Event]] = {}
        # Once stopped, no new watch may start: an unstopped watch thread would hold the exit.
        self._closed = False
        self._polled = polled
        # Sticky: a worktree polled once is polled until its watch ends; each with its poll delay.
        self._polling: dict[Key, int] = {}
        self._poll_ms: dict[Key, int] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._watches

    def __len__(self) -> int:
        return len(self._watches)

    def polling(self, key: Key) -> bool:
        return key in self._polling

    def start(self, key: Key, locate: Locate, anchors: Anchors, rescan: Rescan) -> None:
        if self._closed or key in self._watches:
            return
        stop = asyncio.Event()
        task = asyncio.ensure_future(self._run(key, locate, anchors, rescan, stop))
        task.add_done_callback(self._done)
        self._watches[key] = (task, stop)

    def stop(self, key: Key) -> None:
        entry = self._watches.pop(key, None)
        self._polling.pop(key, None)
        self._poll_ms.pop(key, None)
        if entry is not None:
            entry[1].set()

    def stop_run(self, run_id: str) -> None:
        for key in [k for k in self._watches if k[0] == run_id]:
            self.stop(key)

    def stop_all(self) -> None:
        self._closed = True
        for key in list(self._watches):
            self.stop(key)

    async def _run(
        self, key: Key, locate: Locate, anchors: Anchors, rescan: Rescan, stop: asyncio.Event
    ) -> None:
        while not stop.is_set():
            worktree = await asyncio.to_thread(locate)
            if worktree is None:
                await self._appear(anchors(), stop)
                continue
            if not await until_checked_out(worktree, stop):
                continue  # gone (or stopping) before its checkout ended
            await self._decide(key, worktree)  # before the scan: the watch must follow it closely
            await rescan()
            await self._follow(key, worktree, rescan, stop)
            if not stop.is_set():
                await rescan()  # the worktree went: its diagnostics go with it

    async def _follow(self, key: Key, worktree: Path, rescan: Rescan, stop: asyncio.Event) -> None:
        """Follow `worktree` until it goes or the watch stops: live while watches last, else polled."""
        while not stop.is_set() and worktree.is_dir():
            poll_ms = self._polling.get(key)
            try:
                exhausted = await self._batches(worktree, rescan, stop, poll_ms=poll_ms)
            except OSError as exc:
                if poll_ms is not None or not inotify.is_limit_error(exc):
                    raise
                exhausted = True
            if not exhausted:
                return
            self._fall_back(key, worktree, "inotify ran out of watches while watching it")

    async def _decide(self, key: Key, worktree: Path) -> None:
        """Poll `worktree` if watching it live would leave too few inotify watches."""
        if key in self._polling:
            return
        found = await asyncio.to_thread(inotify.budget, worktree)
        self._poll_ms[key] = found.poll_ms
        if not found.fits:
            why = f"its {found.needed} directories need as many inotify watches and {found.free} are free"
            self._fall_back(key, worktree, f"{why} (limit {found.limit})")

    def _fall_back(self, key: Key, worktree: Path, why: str) -> None:
        if key in self._polling:
            return
        poll_ms = self._polling[key] = self._poll_ms.get(key, inotify.POLL_MIN_MS)
        run_id, lane = key
        message = (
            f"flowd: story '{lane}' (run {run_id}) is polled every {poll_ms / 1000:g} s, not watched: "
            f"{why}; raise fs.inotify.max_user_watches to follow {worktree} live"
        )
        log.warning("%s", message)
        if self._polled is not None:
            self._polled(key, message)

    @staticmethod
    async def _batches(worktree: Path, rescan: Rescan, stop: asyncio.Event, *, poll_ms: int | None) -> bool:
        """Rescan on each batch of changes (polled every `poll_ms` if set, else watched live);
        True when inotify ran out of watches on the way."""
        polling = poll_ms is not None
        watch_filter = DefaultFilter(ignore_dirs=(*DefaultFilter.ignore_dirs, ".flow"))
        checked = 0.0

        async def settle_and_rescan() -> None:
            await asyncio.sleep(SETTLE_S)
            await settled(worktree, stop)
            if not stop.is_set() and worktree.is_dir():
                await rescan()

        # The scan before this watch cannot see a write made until the watch is in place (inotify has
        # no past; a poll's first round is its baseline): one more scan once it is, which the
        # watcher's set-up (synchronous, on the first step of the loop below) precedes.
        again: asyncio.Task[None] | None = asyncio.ensure_future(settle_and_rescan())
        try:
            with contextlib.suppress(FileNotFoundError, RuntimeError):
                async for changes in awatch(
                    worktree,
                    stop_event=stop,
                    debounce=DEBOUNCE_MS,
                    step=STEP_MS,
                    watch_filter=watch_filter,
                    force_polling=polling,
                    poll_delay_ms=poll_ms or inotify.POLL_MIN_MS,
                ):
                    if not worktree.is_dir():
                        return False
                    if again is not None:
                        again.cancel()
                    await settled(worktree, stop)
                    await rescan()
                    again = asyncio.ensure_future(settle_and_rescan())
                    now = asyncio.get_running_loop().time()
                    if not polling and now - checked >= RECHECK_S and _adds_directories(changes):
                        checked = now
                        if await asyncio.to_thread(_exhausted):
                            return True
        finally:
            if again is not None:
                again.cancel()
        return False

    @staticmethod
    async def _appear(paths: list[Path], stop: asyncio.Event) -> None:
        """Return after something changes next to any of `paths` (or a short while passes)."""
        dirs = sorted({d for p in paths if (d := nearest_existing(p.parent)) is not None})
        if not dirs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), APPEAR_RECHECK_S)
            return
        quit_early = asyncio.Event()
        loop = asyncio.get_running_loop()
        timer = loop.call_later(APPEAR_RECHECK_S, quit_early.set)
        relay = asyncio.ensure_future(stop.wait())
        relay.add_done_callback(lambda _: quit_early.set())
        try:
            async for _ in _quiet(
                awatch(
                    *dirs,
                    recursive=False,
                    stop_event=quit_early,
                    debounce=DEBOUNCE_MS,
                    step=STEP_MS,
                    watch_filter=None,
                )
            ):
                return
            # Out of watches: the recheck timer is the watch (it is short).
            await quit_early.wait()
        finally:
            timer.cancel()
            relay.cancel()

    @staticmethod
    def _done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("worktree watch failed: %s", task.exception())


async def _quiet(changes: AsyncIterator[set[tuple[Change, str]]]) -> AsyncIterator[set[tuple[Change, str]]]:
    """`changes` until it ends, or fails for a path gone, a watcher closed or no watch left."""
    try:
        async for batch in changes:
            yield batch
    except (FileNotFoundError, RuntimeError):
        return
    except OSError as exc:
        if not inotify.is_limit_error(exc):
            raise


def _adds_directories(changes: set[tuple[Change, str]]) -> bool:
    return any(change == Change.added and Path(path).is_dir() for change, path in changes)


def _exhausted() -> bool:
    """No watch is left for this user: notify may have skipped the newest directories."""
    return inotify.watches_in_use() >= inotify.limit()
