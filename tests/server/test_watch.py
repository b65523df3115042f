"""Worktree watches on a real file system: a watch started before its worktree exists follows it
once it appears, outlives its deletion by hand, and follows it again when it comes back."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from flowd.server import inotify
from flowd.server.watch import CHECKOUT_POLL_S, WorktreeWatches, until_checked_out
from flowd.vcs.changes import merge_in_progress


class Recorder:
    """The rescan callback: records what the worktree held at each rescan."""

    def __init__(self, worktree: Path) -> None:
        self.worktree = worktree
        self.seen: list[list[str]] = []
        self.changed = asyncio.Event()

    async def rescan(self) -> None:
        exists = self.worktree.is_dir()
        self.seen.append(sorted(p.name for p in self.worktree.iterdir()) if exists else ["<gone>"])
        self.changed.set()

    async def until(self, wanted: list[str], timeout: float = 20) -> None:
        async def loop() -> None:
            while not self.seen or self.seen[-1] != wanted:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


async def test_a_watch_waits_for_its_worktree_and_outlives_its_deletion(tmp_path: Path) -> None:
    state = tmp_path / ".flow" / "epics" / "e" / "stories" / "s.json"
    worktree = tmp_path / "worktrees" / "e" / "s"
    recorder = Recorder(worktree)
    watches = WorktreeWatches()

    def locate() -> Path | None:
        # As the server does: the state file names the worktree, which must exist.
        return worktree if state.exists() and worktree.is_dir() else None

    watches.start(("run", "s"), locate, lambda: [state, worktree], recorder.rescan)
    try:
        await asyncio.sleep(0.2)
        assert recorder.seen == []  # nothing to scan yet

        # The engine's first attempt: the worktree, then the state file (nested new directories).
        worktree.mkdir(parents=True)
        (worktree / "a.txt").write_text("a")
        state.parent.mkdir(parents=True)
        state.write_text("{}")
        await recorder.until(["a.txt"])

        (worktree / "stray.txt").write_text("x")
        await recorder.until(["a.txt", "stray.txt"])

        shutil.rmtree(worktree)  # deleted by hand
        await recorder.until(["<gone>"])

        worktree.mkdir(parents=True)  # a resume puts it back
        (worktree / "b.txt").write_text("b")
        await recorder.until(["b.txt"])
        assert ("run", "s") in watches
    finally:
        watches.stop_all()
    assert ("run", "s") not in watches


@pytest.mark.parametrize("how", ["watched", "polled"])
async def test_a_write_while_the_watch_starts_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The first scan runs before the watch is in place (inotify has no past, a poll's first round is
    its baseline): a write in between is seen by one more scan once the watch is up."""
    # Either way by the budget, not by what the machine's other watchers leave free.
    monkeypatch.setenv(inotify.BUDGET_ENV, "0" if how == "polled" else str(2**31 - 1))
    worktree = tmp_path / "wt"
    worktree.mkdir()
    recorder = Recorder(worktree)

    async def rescan_then_write() -> None:
        await recorder.rescan()
        if len(recorder.seen) == 1:  # the write lands right after the first scan
            (worktree / "gap.txt").write_text("x")

    watches = WorktreeWatches()
    watches.start(("run", "s"), lambda: worktree, lambda: [worktree], rescan_then_write)
    try:
        await recorder.until(["gap.txt"], timeout=10)
        assert watches.polling(("run", "s")) == (how == "polled")
    finally:
        watches.stop_all()


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    """A repository whose one commit holds `files`."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    return repo


async def test_no_scan_sees_a_merge_half_done_and_one_follows_when_head_moves(tmp_path: Path) -> None:
    """A catch-up merge writes the epic's files before git moves HEAD (no event in the worktree):
    no scan runs while MERGE_HEAD exists, and one more runs after the commit lands."""
    repo = _repo(tmp_path, {"base.txt": "base"})
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "story", str(worktree))
    (repo / "epic.txt").write_text("from the epic")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "epic work")

    merging: list[bool] = []
    heads: list[str] = []
    changed = asyncio.Event()

    async def rescan() -> None:
        merging.append(merge_in_progress(worktree))
        heads.append(git(worktree, "rev-parse", "HEAD"))
        changed.set()

    watches = WorktreeWatches()
    watches.start(("run", "s"), lambda: worktree, lambda: [worktree], rescan)
    try:
        await asyncio.wait_for(changed.wait(), 20)  # the first scan, on start
        git(worktree, "merge", "-q", "--no-ff", "--no-commit", "main")
        assert merge_in_progress(worktree)
        await asyncio.sleep(0.5)  # the merge's files are in the worktree: their batch is waiting
        git(worktree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "catch up")
        merged = git(worktree, "rev-parse", "HEAD")

        async def until_scanned_at_merge() -> None:
            while merged not in heads:
                changed.clear()
                await changed.wait()

        await asyncio.wait_for(until_scanned_at_merge(), 20)
        assert not any(merging)
    finally:
        watches.stop_all()
        git(repo, "worktree", "remove", "--force", str(worktree))


async def test_a_worktree_is_watched_and_scanned_only_once_its_checkout_has_ended(tmp_path: Path) -> None:
    """A story's files are written after its worktree appears: neither the watch budget nor a scan
    may see it half-written (too few directories to count, every file a change); both follow
    once git has written its index."""
    repo = _repo(tmp_path, {"a.txt": "a", "b.txt": "b"})
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--no-checkout", "-b", "story", str(worktree))
    (worktree / "a.txt").write_text("a")  # the checkout, half-way
    recorder = Recorder(worktree)
    watches = WorktreeWatches()
    watches.start(("run", "s"), lambda: worktree, lambda: [worktree], recorder.rescan)
    try:
        for _ in range(6):  # several of the watch's looks at the half-made worktree
            await asyncio.sleep(CHECKOUT_POLL_S)
        assert recorder.seen == []
        git(worktree, "reset", "-q", "--hard")
        await recorder.until([".git", "a.txt", "b.txt"])
        assert recorder.seen[0] == [".git", "a.txt", "b.txt"]
    finally:
        watches.stop_all()


async def test_a_worktree_removed_before_its_checkout_ended_is_not_waited_for(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    git(_repo(tmp_path, {}), "worktree", "add", "-q", "--no-checkout", "-b", "story", str(worktree))
    waiting = asyncio.ensure_future(until_checked_out(worktree, asyncio.Event()))
    await asyncio.sleep(3 * CHECKOUT_POLL_S)
    assert not waiting.done()
    shutil.rmtree(worktree)
    assert await asyncio.wait_for(waiting, 10) is False
