"""Spare worktrees (docs/repositories.md "Worktree reuse"): a finished lane's worktree is kept for
the next story or task that starts, which checks its branch out there (only what differs is
written) instead of a full remove then add; what no lane takes is put in the trash and removed
after the run has ended, or, up to `[worktree] keepSpares`, kept for the next run of any epic.

Layout under `<worktreeRoot>/<epic>/`: `_spare/<n>` holds a detached worktree no lane uses, whole
and registered with git at that path; `_trash/<n>` holds directories being deleted, never used
again, whatever state a crash left them in. Neither name can be a story id (ids start with a
letter or a digit), so a spare is never mistaken for a story's worktree on resume. Spares kept
between runs are in `<worktreeRoot>/_spare/<n>` (no epic id either); a run starting takes them all
into its own pool, and gives back up to `keepSpares` when it ends.

A worktree with checked-out submodules is never made a spare: `git worktree move` refuses it
(their git dirs point back by relative paths), so it goes to the trash instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.base.layout import SPARE_DIR, TRASH_DIR
from flowd.events.model import Event, Info
from flowd.trace.log import pid_alive
from flowd.vcs import sparse
from flowd.vcs.bootstrapped import bootstrapped
from flowd.vcs.gitcli import named_by_dotgit, private_git_dir
from flowd.vcs.gitops import Repo
from flowd.vcs.submodules import has_submodules

COMING_WAIT_S = 5.0  # how long a lane waits for a worktree on its way back before adding one


def trash_root(lanes: Path) -> Path:
    return lanes / TRASH_DIR


def kept_root(worktree_root: Path) -> Path:
    """Where spares wait between runs: beside the epics' folders, shared by every epic."""
    return worktree_root / SPARE_DIR


def to_trash(lanes: Path, path: Path) -> Path | None:
    """Move `path` (a directory under `lanes`) into the trash: one rename, so it is gone from
    where it was at once; git's record of a worktree there is pruned when the trash is emptied."""
    target = trash_root(lanes) / uuid.uuid4().hex[:12]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)
    except FileNotFoundError:
        return None
    except OSError:
        shutil.rmtree(path, ignore_errors=True)  # another file system: delete it here
        return None
    return target


class Spares:
    """One run's pool of spare worktrees for one epic. Blocking (called in worker threads)."""

    def __init__(
        self, repo: Repo, lanes: Path, emit: Callable[[Event], object] | None = None, keep: int = 0
    ) -> None:
        self.repo = repo
        self.lanes = lanes
        self.root = lanes / SPARE_DIR
        self.kept = kept_root(lanes.parent)
        self.keep = keep  # how many to leave for the next run when this one ends
        self.emit = emit
        self._lock = threading.Lock()
        self._given = threading.Condition(self._lock)  # a spare came, or a give in flight ended
        self._coming = 0  # gives in flight (`expect`): a lane's worktree on its way back
        self.waiting = 0  # lanes waiting for one of those (under the lock; tests watch it)
        self._free: list[Path] = []
        self._sparse: dict[str, bool] = {}  # whether a free spare is a sparse checkout (by its path)

    def info(self, message: str, lane: str | None = None) -> None:
        if self.emit is not None:
            self.emit(Info(lane=lane, message=message))

    def recover(self) -> None:
        """Run start, under the epic lock: a spare a killed run left is kept when git knows it at
        its place (a move killed half-way left it elsewhere in git's record); anything else
        there goes to the trash. Then the spares earlier runs kept join the pool."""
        known = self._registered()
        if self.root.is_dir():
            for entry in sorted(self.root.iterdir()):
                if os.path.realpath(entry) in known:
                    self._free.append(entry)
                else:
                    to_trash(self.lanes, entry)
        if self.kept.is_dir():
            for entry in sorted(self.kept.iterdir()):
                if not entry.name.startswith("."):  # `.fill-<pid>`: spares still being made
                    self._claim(entry, known)
            with contextlib.suppress(OSError):
                self.kept.rmdir()

    def _claim(self, entry: Path, known: set[str]) -> None:
        """Take a kept spare into this run's pool (one move). Another run starting at the same
        moment may take it first: its move wins and ours fails, leaving the spare to it."""
        if os.path.realpath(entry) not in known:
            gitdir = named_by_dotgit(str(entry))  # data: git's record of it points elsewhere now
            ours = os.path.realpath(self.repo.common_dir / "worktrees")
            if gitdir is not None and os.path.realpath(gitdir.parent) == ours:
                to_trash(self.lanes, entry)  # ours, but a move killed half-way: git lost it
            return  # else not this repository's: left alone
        target = self.root / entry.name
        try:
            self.repo.worktree_move(entry, target)
        except FlowdError:
            return
        self._free.append(target)

    def _registered(self) -> set[str]:
        return {os.path.realpath(i.path) for i in self.repo.worktrees() if not i.prunable}

    # -- taking ---------------------------------------------------------------------------------
    def take(
        self,
        path: Path,
        branch: str,
        start: str,
        include: Path | None = None,
        cone: Sequence[str] | None = None,
        *,
        checkout: bool = True,
    ) -> str:
        """A worktree at `path` on `branch` made at `start` (`start == branch`: the existing branch
        as it is), exactly as `git worktree add` would make it, or with only the folders `cone`
        checked out (flowd/vcs/sparse.py). What a killed run left at `path` is reset in place;
        else a spare is moved there and reset; else one is added. `include`: the
        `.worktreeinclude` file, whose copies a reused worktree may keep (compared and refreshed
        by the bootstrap that follows). `checkout` False: a whole worktree added is left for the
        caller's `Repo.check_out_if_empty` (a story checks out after the merge lock is free).
        Returns how: "reset", "reused" or "added"."""
        path = Path(path).absolute()
        if path.exists() and (path / ".git").is_file():
            if os.path.realpath(path) not in self._registered():
                with contextlib.suppress(FlowdError):
                    self.repo.worktree_repair(path)  # a move killed between its two steps
            if os.path.realpath(path) in self._registered() and self._reset(
                path, branch, start, include, cone
            ):
                return "reset"
            to_trash(self.lanes, path)
            with contextlib.suppress(FlowdError):
                self.repo.worktree_prune()
        while (spare := self._pop(for_cone=cone is not None)) is not None:
            if self._move_and_reset(spare, path, branch, start, include, cone):
                return "reused"
        fresh = None if start == branch else start
        if cone is not None:
            sparse.add_sparse(self.repo, path, branch, fresh, cone)
        else:
            self.repo.worktree_add(path, branch, start=fresh, beside=True, checkout=checkout)
        return "added"

    def take_free(
        self,
        path: Path,
        branch: str,
        start: str,
        include: Path | None = None,
        cone: Sequence[str] | None = None,
    ) -> bool:
        """`take` when more than one spare is free now (none waited for, none added): a lane made
        ahead of its launch (engine/ahead.py) leaves a spare for a lane that starts meanwhile.
        False: it took none."""
        spare = self.reserve(1, for_cone=cone is not None)
        if spare is None:
            return False
        return self._move_and_reset(spare, Path(path).absolute(), branch, start, include, cone)

    def reserve(self, leave: int, *, for_cone: bool = False) -> Path | None:
        """A free spare taken only when more than `leave` are free (the merge train's first
        candidate, a lane made ahead): the lanes that start come first (a lane waits for its
        worktree, while these are made beside the lanes' work)."""
        with self._lock:
            return self._pop_locked(for_cone=for_cone) if len(self._free) > leave else None

    def take_detached(self, spare: Path, path: Path, commit: str) -> bool:
        """The `reserve`d `spare` moved to `path` and reset to `commit`, detached and whole (the
        train's candidate worktree, docs/merging.md "Made ahead"). False, with nothing left at
        `path`, when it could not be (the train then adds its own)."""
        return self._move_and_reset(spare, Path(path).absolute(), None, commit, None, None)

    def _move_and_reset(
        self,
        spare: Path,
        path: Path,
        branch: str | None,
        start: str,
        include: Path | None,
        cone: Sequence[str] | None,
    ) -> bool:
        """`spare` moved to `path` and reset there (`_reset`); False, the spare in the trash,
        when either failed."""
        try:
            self.repo.worktree_move(spare, path)
        except FlowdError:
            to_trash(self.lanes, spare)
            return False
        if self._reset(path, branch, start, include, cone):
            return True
        to_trash(self.lanes, path)
        with contextlib.suppress(FlowdError):
            self.repo.worktree_prune()
        return False

    def _pop(self, *, for_cone: bool) -> Path | None:
        """A free spare (`_pop_locked`); with none free while a give is in flight, the one it
        brings, waited for up to `COMING_WAIT_S`: a merged story gives its worktree back after
        its dependents have launched (engine/story.py), and one of them would otherwise add a
        worktree, all of it written, where the spare needs only what differs."""
        deadline = time.monotonic() + COMING_WAIT_S
        with self._given:
            while (spare := self._pop_locked(for_cone=for_cone)) is None and self._coming > 0:
                left = deadline - time.monotonic()
                self.waiting += 1
                try:
                    if left <= 0 or not self._given.wait(left):
                        return self._pop_locked(for_cone=for_cone)
                finally:
                    self.waiting -= 1
            return spare

    def expect(self) -> None:
        """A lane's worktree is on its way back (`give`, then `arrived`, whatever became of it)."""
        with self._given:
            self._coming += 1

    def arrived(self) -> None:
        """A give `expect` announced is over: a spare, the trash or kept where it was."""
        with self._given:
            self._coming = max(0, self._coming - 1)
            self._given.notify_all()

    def _pop_locked(self, *, for_cone: bool) -> Path | None:
        """A free spare for a sparse lane (`for_cone`: only a sparse spare, whose cone is changed; a
        whole one would delete most of its files on the lane's path, where a new sparse worktree
        writes only its cone) or for a whole one (a whole spare first, else a sparse one made whole:
        the files written are those a new worktree would write)."""
        for spare in reversed(self._free):
            if self._is_sparse(spare) == for_cone:
                self._free.remove(spare)
                self._sparse.pop(str(spare), None)
                return spare
        return None if for_cone or not self._free else self._free.pop()

    def _is_sparse(self, spare: Path) -> bool:
        key = str(spare)
        if key not in self._sparse:
            try:
                self._sparse[key] = sparse.is_sparse(spare)
            except FlowdError:
                self._sparse[key] = False
        return self._sparse[key]

    def _reset(
        self, path: Path, branch: str | None, start: str, include: Path | None, cone: Sequence[str] | None
    ) -> bool:
        try:
            self.repo.reset_worktree(path, branch, start, keep=self._keep(path, include))
            sparse.apply_cone(path, cone)  # the previous lane's folders, or the whole tree, go
        except FlowdError as exc:
            self.info(f"could not reuse the worktree {path} ({exc}); making a new one")
            return False
        return True

    def _keep(self, path: Path, include: Path | None) -> list[str]:
        """The previous bootstrap's copies the user's checkout still has for this lane."""
        copied = bootstrapped(path)
        if not copied or include is None or not include.is_file():
            return []
        return sorted(copied & set(self.repo.ignored_matching(include)))

    # -- giving back ----------------------------------------------------------------------------
    def give(self, path: Path, delete_branch: str | None = None, *, force: bool = False) -> str | None:
        """Take back a finished lane's worktree: a spare, or (with submodules) the trash. Returns
        why it was left where it is instead, or None. Uncommitted changes are someone's work:
        kept, unless `force` (a task worktree, whose work merged or is thrown away)."""
        path = Path(path).absolute()
        try:
            dirty = [] if force else self.repo.status_paths(path)
            if dirty:
                return f"it has uncommitted changes ({', '.join(dirty[:5])})"
            self.repo.detach(path)
            if delete_branch is not None and self.repo.branch_exists(delete_branch):
                self.repo.delete_branch(delete_branch, force=True)
        except FlowdError as exc:
            return str(exc)
        if has_submodules(path):
            to_trash(self.lanes, path)
            return None
        spare = self.root / uuid.uuid4().hex[:12]
        try:
            self.repo.worktree_move(path, spare)
        except FlowdError:
            to_trash(self.lanes, path)
            return None
        with self._given:
            self._free.append(spare)
            self._given.notify_all()
        return None

    def retire(self) -> None:
        """The run ends: up to `keep` spares (counting those other runs left) are kept for the next
        run, of this epic or another; the others go to the trash (`reap` empties it)."""
        with self._lock:
            spares, self._free = self._free, []
        room = self.keep - len(waiting(self.kept))
        for spare in spares:
            if room > 0 and self._keep_for_later(spare):
                room -= 1
            else:
                to_trash(self.lanes, spare)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    def _keep_for_later(self, spare: Path) -> bool:
        try:
            self.repo.worktree_move(spare, self.kept / spare.name)
        except FlowdError:
            return False
        return True


def waiting(kept: Path) -> list[Path]:
    """The spares kept between runs, not those a `fill` is still making."""
    return [e for e in sorted(kept.iterdir()) if not e.name.startswith(".")] if kept.is_dir() else []


def fill(repo: Repo, worktree_root: Path, keep: int) -> int:
    """After a run, off its path: add spares (detached at the checkout's `HEAD`) until `keep` wait
    between runs, since the run's epic worktree or a lane with submodules used some up. Each is
    made in `.fill-<pid>/` and moved in whole, so a run starting meanwhile takes none half-made;
    what a killed fill left there is removed first. Returns how many were added."""
    kept = kept_root(worktree_root)
    for staging in kept.glob(".fill-*") if kept.is_dir() else []:
        pid = staging.name.removeprefix(".fill-")
        if not (pid.isdigit() and pid_alive(int(pid))):
            _remove_all(repo, staging)
    staging = kept / f".fill-{os.getpid()}"
    added = 0
    made: tuple[Path, float] | None = None  # the spare last added, when its checkout ended
    try:
        for _ in range(keep - len(waiting(kept))):
            name = uuid.uuid4().hex[:12]
            repo.worktree_add_detached(staging / name, "HEAD")
            if made is not None:  # published once the next one is made: its second has passed
                _publish(repo, kept, *made)
            made = (staging / name, time.time())
            added += 1
        if made is not None:
            _publish(repo, kept, *made)
    except FlowdError:
        pass  # a spare is only a shortcut: the next run adds what it lacks
    finally:
        _remove_all(repo, staging)
    return added


def _publish(repo: Repo, kept: Path, spare: Path, checked_out: float) -> None:
    """Move a staged spare in among those kept, its index written once more first, a second or
    more after its checkout. git rereads every file whose mtime is not older than its index's in
    whole seconds (its racy-timestamp rule), and a checkout writes both in the same second: a
    spare never written again makes every scan of each worktree it becomes read its files again
    (docs/performance.md "Why a fresh worktree's git status is slow"). Here no one else knows
    the spare, so the write takes no one's index lock; the margin is the kernel's coarser clock."""
    time.sleep(max(0.0, math.floor(checked_out) + 1.05 - time.time()))
    repo.refresh_index(spare)
    repo.worktree_move(spare, kept / spare.name)


def _remove_all(repo: Repo, staging: Path) -> None:
    for entry in sorted(staging.iterdir()) if staging.is_dir() else []:
        with contextlib.suppress(FlowdError):
            repo.worktree_remove(entry, force=True)
    shutil.rmtree(staging, ignore_errors=True)


def reap(lanes: Path) -> None:
    """Empty `lanes`' trash, and the private git dir of each worktree it held. Never `git
    worktree prune`: a run started meanwhile may be moving a worktree (git's record of it then
    points nowhere for a moment), and a prune would take that one's git dir too."""
    trash = trash_root(lanes)
    if not trash.is_dir():
        return
    for entry in sorted(trash.iterdir()):
        # A worktree, or a merge train slot `w<n>` holding one (`w<n>/_epic`).
        held = [entry, *(p for p in entry.iterdir() if p.is_dir())] if entry.is_dir() else []
        admins = [a for a in (_trashed_admin(lanes, wt) for wt in held) if a is not None]
        shutil.rmtree(entry, ignore_errors=True)
        for admin in admins:
            if not _in_use(admin):
                shutil.rmtree(admin, ignore_errors=True)
    with contextlib.suppress(OSError):
        trash.rmdir()


def _trashed_admin(lanes: Path, wt: Path) -> Path | None:
    """The private git dir of the trashed worktree `wt`, only when it is one flowd made: a real
    folder `<git dir>/worktrees/<id>` whose own `gitdir` file names a place under the worktree root.
    The `.git` file was the lane's to write: one pointing at any other folder called `worktrees/…`
    (the user's) must not make flowd delete it (docs/sandbox.md "flowd's own git")."""
    admin = named_by_dotgit(str(wt))  # data, checked below (git's record points elsewhere now)
    if admin is None or admin.parent.name != "worktrees" or admin.is_symlink() or not admin.is_dir():
        return None
    try:
        named = admin.joinpath("gitdir").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    root = os.path.realpath(lanes.parent)
    return admin if named.startswith(root.rstrip(os.sep) + os.sep) else None


def _in_use(admin: Path) -> bool:
    """Whether a worktree still lives where the git dir `admin` says its worktree is, pointing
    back at it (git names a new worktree's dir afresh, so one that does is not ours)."""
    try:
        where = Path(admin.joinpath("gitdir").read_text(encoding="utf-8").strip())
    except OSError:
        return False
    return where.is_file() and private_git_dir(where.parent) == admin


def after_run(lanes: Path, repo: Path | None = None, keep: int = 0) -> None:
    """What follows a run, off its path: `lanes`' trash emptied, then (with `keep`) the spares
    kept between runs made up to `keep` in `repo`."""
    reap(lanes)
    if keep and repo is not None:
        fill(Repo(repo), lanes.parent, keep)


def reap_in_background(
    lanes: Path, repo: Path | None = None, keep: int = 0
) -> subprocess.Popen[bytes] | None:
    """Start `after_run` in a process of its own session, which outlives the run's process (the
    user does not wait for 25,000 files to go); a rerun or `flowd clean` finishes what it did not."""
    if not trash_root(lanes).is_dir() and not (keep and repo is not None):
        return None
    fills = [str(repo), str(keep)] if keep and repo is not None else []
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flowd.engine.spares", str(lanes), *fills],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    # Waited for in a thread so a long-lived caller (the server's tests) leaves no zombie.
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


if __name__ == "__main__":
    _lanes, *_fills = sys.argv[1:]
    after_run(Path(_lanes), Path(_fills[0]) if _fills else None, int(_fills[1]) if _fills else 0)
