"""flowd taking a lane's objects in (docs/sandbox.md "The quarantine"): before and after every
step of a lane (a turn, a gate, a setup command: `RunContext.step`), and for every lane worktree
when a run ends, what the lane's git wrote into its quarantine is checked and moved into the
repository's store (flowd/vcs/quarantine.py), and the refs the lane moves (its worktree's
`HEAD` and the branch it names) must then name objects the repository holds.
After a step (its strays killed, its move taken in) the lane repository is made anew from flowd's
side (docs/sandbox.md "The lane repository"): your own git in the worktree reads nothing the lane
planted there.

A lane whose objects fail: they are not taken, its branch is put back where flowd last found it
whole, its quarantine is thrown away, and the story fails with one sentence, in its findings
too, and a `LaneEscape {what: "gitObjects"}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.base.layout import EPIC_LANE, story_of_worktree
from flowd.engine.core.stops import StoryFailed
from flowd.engine.fingerprint import read_ref
from flowd.engine.state import EpicPaths, append_findings
from flowd.events.model import Event, LaneEscape
from flowd.sandbox import confine
from flowd.vcs import lane_repo
from flowd.vcs.gitcli import GitDirChanged, admin_of, run_git
from flowd.vcs.incoming import Refused
from flowd.vcs.quarantine import discard, drop_missing_entries, missing, quarantine, take_in

log = logging.getLogger("flowd.engine.lane_objects")

POLL_S = 1.0  # how often a running step's quarantine is looked at (an empty look: about 0.4 ms)
_HEAD_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class LaneObjects:
    """One run's (or one Ray node's) take-ins; thread-safe (take-ins run off the event loop)."""

    common_dir: Path
    emit: Callable[[Event], object]
    paths: EpicPaths | None
    # Each ref (`refs/…`, or `<admin>` for a detached worktree HEAD) as its last check left it.
    good: dict[str, str] = field(default_factory=dict)
    # Private git dirs refused during their current step (their branch stays put back).
    refused: set[Path] = field(default_factory=set)
    _taken: dict[Path, set[str]] = field(default_factory=dict)  # taken during the running step
    _serial: dict[Path, threading.Lock] = field(default_factory=dict)  # one take-in at a time
    _steps: dict[Path, int] = field(default_factory=dict)  # steps running in each worktree
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admin_of(self, home: Path) -> Path | None:
        """The private git dir of the worktree `home`, found from the repository's side (never
        where the lane's `.git` file points: docs/sandbox.md "flowd's own git"); None for no
        worktree of this repository, or one whose admin files contradict each other (detection
        names that `gitDir`)."""
        try:
            return admin_of(Path(os.path.realpath(self.common_dir)), home)
        except GitDirChanged:
            return None

    def take(self, lane: str, home: Path, *, during: bool = False) -> None:
        """Take in what the lane's worktree `home` wrote; `StoryFailed` when it cannot be.
        `during`: while the step runs (what is taken stays in the quarantine until its end).
        Take-ins of one worktree never overlap (one would remove what the other reads)."""
        admin = self.admin_of(home)
        if admin is None:
            return
        with self._lock:
            serial = self._serial.setdefault(admin, threading.Lock())
        with serial:
            self._take(lane, home, admin, during)

    def _take(self, lane: str, home: Path, admin: Path, during: bool) -> None:
        with self._lock:
            refused = admin in self.refused
            already = frozenset(self._taken.get(admin, ()))
        if refused:
            discard(admin)  # refused earlier in this step: nothing more comes in
            lane_repo.sync(self.common_dir, admin, home, force=True)
            self._put_all_back(admin, home)
            self._drop_refused_entries(admin)
            return
        if not os.path.lexists(quarantine(admin)):
            # No process of the lane ran with a quarantine yet: what its refs name is the
            # repository's (where a later refusal puts its branch back).
            tips = self._tips(admin)
            with self._lock:
                self.good.update(tips)
            return
        # The refs first: git writes a commit's objects before it moves a ref to it, so whatever
        # a ref named here is in the quarantine (or taken) when it is read just after.
        tips = self._tips(admin)
        move = lane_repo.moved(self.common_dir, admin)
        try:
            taken = take_in(self.common_dir, admin, already, remove=not during)
            with self._lock:
                have = taken.names | already
                unsure = [sha for key, sha in tips if sha not in have and self.good.get(key) != sha]
            if move is not None:
                tips = [*tips, (move.ref or str(admin), move.new)]
                if move.new not in have:  # what was just taken in is there: no git process to ask
                    unsure = [*unsure, move.new]
            lost = missing(self.common_dir, unsure)
            if lost:
                raise Refused(
                    f"it points {_names(tips, lost)} at {lost[0]}, which no store of the repository holds"
                )
            if move is not None:
                # Its objects are in: the branch in your repository follows the lane's own.
                adopted = lane_repo.adopt(self.common_dir, admin, home, move, taken.held)
                tips = [(move.ref, move.new)] if adopted and move.ref is not None else self._tips(admin)
            with self._lock:
                self.good.update(tips)
                if during:
                    self._taken.setdefault(admin, set()).update(taken.names, taken.packs)
                else:
                    self._taken.pop(admin, None)
        except Refused as exc:
            if during:
                # The lane's git may be half way through writing (a tree seen before the blob it
                # names, read in another folder a moment earlier): the step's end decides.
                log.debug("%s: not taken in while its step runs: %s", lane, exc)
                return
            with self._lock:
                self.refused.add(admin)
                self._taken.pop(admin, None)
            self._refuse(lane, admin, home, tips, str(exc))

    def _tips(self, admin: Path) -> list[tuple[str, str]]:
        """(key, commit) of what the worktree's HEAD names: a branch and its value, or itself."""
        try:
            fd = os.open(admin / "HEAD", _HEAD_FLAGS)
            with os.fdopen(fd, "rb") as handle:
                head = handle.read(4096).decode("utf-8", "replace").strip()
        except OSError:
            return []
        if head.startswith("ref: "):
            name = head.removeprefix("ref: ").strip()
            if not name.startswith("refs/heads/") or ".." in name:
                return []
            ref = read_ref(self.common_dir, name)
            return [(name, ref.sha)] if ref is not None and _is_name(ref.sha) else []
        return [(str(admin), head)] if _is_name(head) else []

    def _refuse(self, lane: str, admin: Path, home: Path, tips: list[tuple[str, str]], reason: str) -> None:
        discard(admin)
        lane_repo.sync(self.common_dir, admin, home, force=True)  # its branch back at yours
        restored = self._put_all_back(admin, home, tips)
        restored = self._drop_refused_entries(admin, tips) and restored
        self._tell(lane, admin, reason, restored)

    def _drop_refused_entries(self, admin: Path, tips: list[tuple[str, str]] | None = None) -> bool:
        """The reflogs of the branch the worktree's HEAD names (a story's only) and of the HEAD
        itself without any entry naming an object the repository does not hold: the lane's git
        logged its refused commits there, and `git fsck` of your repository would call them
        invalid (docs/sandbox.md "The quarantine")."""
        logs = [admin / "logs" / "HEAD"]
        for key, _sha in tips if tips is not None else self._tips(admin):
            if key.startswith("refs/heads/story/") and ".." not in key:
                logs.append(self.common_dir / "logs" / key)
        return all([drop_missing_entries(self.common_dir, log) for log in logs])

    def _put_all_back(self, admin: Path, home: Path, tips: list[tuple[str, str]] | None = None) -> bool:
        """Every ref the worktree's HEAD names that names a missing object, back where flowd last
        found it whole: only the worktree's own HEAD or a story branch (never yours, whatever a
        lane's HEAD says). False when one cannot be."""
        restored = True
        for key, sha in tips or self._tips(admin):
            if not missing(self.common_dir, [sha]):
                continue
            with self._lock:
                good = self.good.get(key)
            ours = key == str(admin) or key.startswith("refs/heads/story/")
            restored = restored and good is not None and ours and self._put_back(admin, home, key, good)
        return restored

    def _put_back(self, admin: Path, home: Path, ref: str, good: str) -> bool:
        """The lane's branch (or its detached HEAD) where flowd last found it whole, the reflog
        index read from it again (its reflogs: `_drop_refused_entries`)."""
        common = ["--git-dir", str(self.common_dir)]
        pinned = ["--git-dir", str(admin), "--work-tree", str(home)]
        env = {"GIT_COMMON_DIR": str(self.common_dir)}
        try:
            if ref.startswith("refs/"):
                run_git(self.common_dir, [*common, "update-ref", ref, good], "")
            else:
                run_git(self.common_dir, [*pinned, "update-ref", "--no-deref", "HEAD", good], "", env=env)
            run_git(self.common_dir, [*pinned, "read-tree", good], "", env=env)
        except FlowdError:
            return False
        return True

    def _tell(self, lane: str, admin: Path, reason: str, restored: bool) -> None:
        where = str(quarantine(admin))
        self.emit(
            LaneEscape(lane=lane, path=where, what="gitObjects", action="undone" if restored else "reported")
        )
        said = f"flowd refused the objects story '{lane}' wrote: {reason}; its work since flowd last took it in was not taken"
        if lane != EPIC_LANE and self.paths is not None:
            append_findings(self.paths, lane, f"## Objects refused\n\n{said} (docs/sandbox.md).")
        raise StoryFailed(f"{said} (docs/sandbox.md)")

    def step(
        self, lane: str | None, home: Path | None, inner: AbstractAsyncContextManager[None]
    ) -> AbstractAsyncContextManager[None]:
        """`inner` (detection's step) with the lane's objects taken in before it and right after
        the step, before detection looks at what the step did."""
        if lane is None or home is None:
            return inner
        return self._around(lane, home, inner)

    @contextlib.asynccontextmanager
    async def _around(
        self, lane: str, home: Path, inner: AbstractAsyncContextManager[None]
    ) -> AsyncIterator[None]:
        admin = self.admin_of(home)
        if admin is not None:
            with self._lock:
                self.refused.discard(admin)  # a new step: refused before is history
                self._steps[admin] = self._steps.get(admin, 0) + 1
        try:
            async with self._taken_in(lane, home, admin, inner):
                yield
        finally:
            if admin is not None:
                # The step's strays are killed (detection's step ended, inside): the lane repository
                # is made anew once no step of the worktree runs (docs/sandbox.md "The lane repository").
                await asyncio.shield(asyncio.to_thread(self._renew, admin, home))

    @contextlib.asynccontextmanager
    async def _taken_in(
        self, lane: str, home: Path, admin: Path | None, inner: AbstractAsyncContextManager[None]
    ) -> AsyncIterator[None]:
        await asyncio.shield(asyncio.to_thread(self.take, lane, home))
        if admin is not None:
            # flowd's own git moved the lane since its last step (its commit, a merge, a reset):
            # the lane repository follows before the lane's processes work again. A run that does
            # not confine its lanes gives them none (docs/sandbox.md "The lane repository").
            confinement = confine.current()
            if confinement is not None and not confinement.enforcing:
                await asyncio.to_thread(lane_repo.drop, admin, home)
            else:
                await asyncio.to_thread(
                    functools.partial(lane_repo.sync, self.common_dir, admin, home, exact=True)
                )
        async with inner:
            failed: list[StoryFailed] = []
            stop = asyncio.Event()
            poll = asyncio.create_task(self._poll(lane, home, failed, stop))
            done = False
            try:
                yield
                done = True
            finally:
                stop.set()  # a take-in in flight ends first
                interrupted = await _ended(poll)
                if done and not failed and not interrupted:
                    await asyncio.shield(asyncio.to_thread(self.take, lane, home))
                else:
                    with contextlib.suppress(StoryFailed):
                        await asyncio.shield(asyncio.to_thread(self.take, lane, home))
                if interrupted:
                    # This story was cancelled (fail-fast, a stop) while the poll ended: the step's
                    # objects are in, and the cancel goes on (it was swallowed here, and a story
                    # fail-fast had stopped ran its next turn).
                    raise asyncio.CancelledError
            if failed:
                raise failed[0]

    def _renew(self, admin: Path, home: Path) -> None:
        """A step of the worktree `home` ended: when it was the last one running there, its lane
        repository is made anew (`lane_repo.renew`), under its take-in's lock (no take-in reads it
        half written; the lane's branch value stays for the next take-in)."""
        with self._lock:
            left = self._steps.get(admin, 1) - 1
            if left > 0:
                self._steps[admin] = left
                return
            self._steps.pop(admin, None)
            serial = self._serial.setdefault(admin, threading.Lock())
        with serial:
            lane_repo.renew(self.common_dir, admin, home)

    async def _poll(self, lane: str, home: Path, failed: list[StoryFailed], stop: asyncio.Event) -> None:
        """While the step runs, what the lane's git wrote is taken in every `POLL_S`: a commit
        an agent makes is in the repository's store within about that, not only at the step's
        end (a `git fetch` or `git gc` in your checkout walks every branch and worktree HEAD)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)
                return
            try:
                await asyncio.to_thread(self.take, lane, home, during=True)
            except StoryFailed as exc:
                failed.append(exc)
                return

    def sweep(self, worktrees: list[Path]) -> None:
        """Every lane worktree once more (the run ends): what a stray wrote last is taken in or
        refused; a refusal here fails no story any more (it is in the trace and the findings).
        Then each lane repository is dropped (docs/sandbox.md "The lane repository"): git in a
        worktree after the run, yours or git's own `worktree` commands, sees flowd's side."""
        for wt in worktrees:
            with contextlib.suppress(StoryFailed):
                self.take(_lane_name(wt), wt)
            admin = self.admin_of(wt)
            if admin is not None:
                lane_repo.drop(admin, wt)


async def _ended(task: asyncio.Task[None]) -> bool:
    """Wait until `task` has ended, however it ends (its own error or cancel is not this task's);
    True when this task was cancelled meanwhile."""
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        return True
    return False


def _is_name(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _names(tips: list[tuple[str, str]], lost: list[str]) -> str:
    keys = [key if key.startswith("refs/") else "its HEAD" for key, sha in tips if sha in lost]
    return " and ".join(keys) or "its HEAD"


def _lane_name(wt: Path) -> str:
    return story_of_worktree(wt.name)
