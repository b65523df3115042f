"""Worktree bookkeeping: listing, adding (idempotent, repairing what a killed run left), removing,
discarding, moving and repairing the linked worktrees of the repository. Each change takes the
repository's lock: they touch shared files of the common git dir."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.vcs import lane_repo
from flowd.vcs.changes import WorktreeChanges
from flowd.vcs.gitcli import (
    GitError,
    git_reason,
    private_git_dir,
    remove_tree,
    run_git,
    same_path,
    unchecked_out,
)

# `git worktree add` as flowd runs it, from your checkout: git copies the sparse patterns of the
# worktree it runs in into each worktree it adds (and checks it out sparse), so a sparse checkout
# of yours made every story's worktree as sparse as yours (docs/repositories.md "Your sparse
# checkout"). flowd's own sparse worktrees set their cone afterwards (flowd/vcs/sparse.py).
ADD = ("-c", "core.sparseCheckout=false", "worktree", "add")


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    branch: str | None  # short name; None when detached
    head: str | None  # None before the first commit
    locked: bool
    prunable: bool  # registered, but its directory is gone


class Worktrees(WorktreeChanges):
    """The worktree bookkeeping of `gitops.Repo`."""

    def worktrees(self) -> list[WorktreeInfo]:
        out = self._run(["worktree", "list", "--porcelain"], f"could not list the worktrees of {self.root}")
        infos: list[WorktreeInfo] = []
        for block in out.strip().split("\n\n"):
            if not block.strip():
                continue
            fields: dict[str, str] = {}
            for line in block.splitlines():
                key, _, value = line.partition(" ")
                fields[key] = value
            path = Path(fields.get("worktree", ""))
            branch = fields.get("branch")
            infos.append(
                WorktreeInfo(
                    path=path,
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    head=fields.get("HEAD") if fields.get("HEAD", "").strip("0") else None,
                    locked="locked" in fields,
                    prunable="prunable" in fields or not path.exists(),
                )
            )
        return infos

    def _worktree_at(self, path: Path) -> WorktreeInfo | None:
        for info in self.worktrees():
            if same_path(info.path, path):
                return info
        return None

    def worktree_prune(self) -> None:
        with self._lock:
            self._run(["worktree", "prune"], f"could not prune the worktrees of {self.root}")

    def worktree_add_detached(
        self, path: Path, commit: str = "HEAD", *, reclaim: bool = False, beside: bool = False
    ) -> Path:
        """A throwaway worktree at `path` with `commit` checked out and no branch. `reclaim`: the
        path is flowd's own, and git may still record it from a killed `git worktree add` (a
        "missing but locked worktree", which `prune` keeps): take it over (`-f -f`). `beside`:
        while other worktrees are added (no ref moves, and git makes each worktree's record
        with an atomic mkdir), so a long checkout holds none of them up."""
        path = Path(path).absolute()
        force = ["-f", "-f"] if reclaim else []
        what = f"could not check out {commit} at {path}"
        with self._lock:
            self._run([*ADD, *force, "--detach", "-q", *_later(beside), str(path), commit], what)
        self.not_sparse_as_yours(path)
        if beside:
            run_git(path, ["reset", "-q", "--hard"], what)  # the checkout itself, holding no lock
        self.sync_submodules(path)
        return path

    def worktree_add(
        self,
        path: Path,
        branch: str,
        start: str | None = None,
        *,
        beside: bool = False,
        checkout: bool = True,
    ) -> Path:
        """A worktree at `path` on `branch`, creating the branch at `start` when it is missing.

        Idempotent: a worktree already there on that branch is returned as is; one whose directory
        was deleted by hand is pruned and recreated (the branch, and so the committed work, stays).
        `beside`: checked out while other worktrees are added (as in `worktree_add_detached`), so
        a lane's checkout of a big repository never waits for another's; what goes wrong is then
        sorted out under the lock. `checkout` False (with `beside`): a new worktree is left for
        the caller's `check_out_if_empty`, once it holds no lock of its own either.
        """
        path = Path(path).absolute()
        if beside:
            made = ["-b", branch, str(path), start] if start is not None else [str(path), branch]
            with self._lock:
                proc = run_git(self.root, [*ADD, "-q", *_later(True), *made], "", ok_codes=range(256))
            if proc.returncode == 0:
                self.not_sparse_as_yours(path)
                if checkout:
                    self.check_out_if_empty(path)
                return path
        with self._lock:
            # Fast path: the common case is a fresh worktree on a fresh branch, one git call.
            if start is not None:
                args = [*ADD, "-q", "-b", branch, str(path), start]
            else:
                args = [*ADD, "-q", str(path), branch]
            proc = run_git(self.root, args, "", ok_codes=range(256))
            if proc.returncode == 0:
                self.not_sparse_as_yours(path)
            else:
                path = self._worktree_add_slow(path, branch, start, proc)
        self.sync_submodules(path)
        return path

    def worktree_register(self, path: Path, branch: str) -> Path:
        """Git's record of a worktree at `path` on the existing `branch`, with nothing checked out
        (no index, no file): one git call, whatever the repository's size."""
        path = Path(path).absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
        args = [*ADD, "--no-checkout", "-q", str(path), branch]
        what = f"could not register the worktree {path} on {branch!r}"
        with self._lock:
            if run_git(self.root, args, what, ok_codes=range(256)).returncode != 0:
                # A record whose folder was deleted by hand holds the path: forget it, then add.
                self._run(["worktree", "prune"], what)
                self._run(args, what)
        self.not_sparse_as_yours(path)
        return path

    def not_sparse_as_yours(self, path: Path) -> None:
        """The worktree `path` just added is whole whatever your checkout is: with per-worktree
        config, git copied your checkout's `config.worktree` into it, `core.sparseCheckout`
        included; that is turned off there (the copy is flowd's, in the new worktree's admin dir)."""
        admin = private_git_dir(path)
        if admin is not None and (admin / "config.worktree").is_file():
            config = ["config", "--file", str(admin / "config.worktree"), "core.sparseCheckout", "false"]
            run_git(self.root, config, f"could not make the worktree {path} whole")

    def check_out_if_empty(self, path: Path) -> None:
        """Write the files of a worktree added with its checkout left for later (no index yet: a
        story's, checked out once the merge lock is free, or one whose process was killed before
        its checkout), its submodules included; one already checked out is left exactly as it is."""
        if unchecked_out(path):
            run_git(path, ["reset", "-q", "--hard"], f"could not check out the worktree {path}")
            self.sync_submodules(path)

    def _worktree_add_slow(
        self, path: Path, branch: str, start: str | None, first: subprocess.CompletedProcess[str]
    ) -> Path:
        """Work out why the one-call add failed, repair what is ours to repair, and add again."""
        what = f"could not create the worktree {path} on branch {branch!r}"
        infos = self.worktrees()
        here = next((i for i in infos if same_path(i.path, path)), None)
        if here is not None and not here.prunable:
            if here.branch == branch:
                self.check_out_if_empty(path)
                return path
            raise GitError(f"{what}: that worktree is on {here.branch or 'a detached HEAD'} instead")
        holder = next((i for i in infos if i.branch == branch and not same_path(i.path, path)), None)
        if holder is not None and not holder.prunable:
            raise GitError(f"{what}: the branch is already checked out in {holder.path}")
        if here is not None or holder is not None:
            # A worktree deleted by hand: forget it, the branch (and its commits) stay.
            run_git(self.root, ["worktree", "prune"], what)
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise GitError(f"{what}: {path} already exists and is not a worktree of {self.root}")
        if self.branch_exists(branch):
            run_git(self.root, [*ADD, "-q", str(path), branch], what)
        elif start is None:
            raise GitError(f"{what}: the branch does not exist and no start point was given")
        elif here is None and holder is None:
            raise GitError(f"{what}: {git_reason(first)}", detail=first.stderr)
        else:
            run_git(self.root, [*ADD, "-q", "-b", branch, str(path), start], what)
        self.not_sparse_as_yours(path)
        return path

    def worktree_remove(self, path: Path, force: bool = False) -> None:
        """Remove the worktree at `path` (its branch stays). A worktree already gone is no error."""
        path = Path(path).absolute()
        what = f"could not remove the worktree {path}"
        with self._lock:
            lane_repo.before_worktree_command(path)
            args = ["worktree", "remove", *(["--force"] if force else []), str(path)]
            proc = run_git(self.root, args, what, ok_codes=range(256))
            if proc.returncode == 0:
                return
            here = self._worktree_at(path)
            if here is None:
                return
            if here.prunable:
                run_git(self.root, ["worktree", "prune"], what)
                return
            if same_path(here.path, self.root):
                raise GitError(f"{what}: it is the user's own checkout")
            if not force and self.is_dirty(path):
                raise GitError(f"{what}: it has uncommitted changes (remove it with force to discard them)")
            if "containing submodules" in proc.stderr:
                # git never removes a worktree with checked-out submodules; their clones live in
                # the worktree's own git dir and go with it (docs/repositories.md).
                remove_tree(path, what)
                run_git(self.root, ["worktree", "prune"], what)
                return
            if not force:
                # Only `.flow/` or bootstrapped files differ: flowd never commits those, so they
                # are not work to keep (an agent's edit of a tracked `.flow/config.toml`).
                again = run_git(
                    self.root, ["worktree", "remove", "--force", str(path)], what, ok_codes=range(256)
                )
                if again.returncode == 0:
                    return
            raise GitError(f"{what}: {git_reason(proc)}", detail=proc.stderr)

    def discard_worktree(self, path: Path, branch: str) -> str | None:
        """Throw away a worktree (work included) and its branch, leftovers of a killed run too.

        Returns why the worktree could not be removed through git (its folder is deleted anyway),
        or None.
        """
        problem = None
        try:
            self.worktree_remove(path, force=True)
        except FlowdError as exc:
            problem = str(exc)
        if Path(path).exists():
            shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(FlowdError):
            self.worktree_prune()
        if self.branch_exists(branch):
            self.delete_branch(branch, force=True)
        return problem

    def worktree_move(self, old: Path, new: Path) -> Path:
        """Move a worktree, its branch and uncommitted work included."""
        old, new = Path(old).absolute(), Path(new).absolute()
        with self._lock:
            try:
                new.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GitError(f"could not create {new.parent} to move the worktree {old} there") from exc
            admin = lane_repo.before_worktree_command(old)
            try:
                run_git(
                    self.root,
                    ["worktree", "move", str(old), str(new)],
                    f"could not move the worktree {old} to {new}",
                )
            finally:
                lane_repo.after_worktree_command(admin, new if new.is_dir() else old)
        return new

    def worktree_repair(self, path: Path) -> None:
        """Point git's record of the worktree whose `.git` file is at `path` back at `path` (a
        rename killed before git's own bookkeeping followed it)."""
        path = Path(path).absolute()
        with self._lock:
            admin = lane_repo.before_worktree_command(path)
            self._run(["worktree", "repair", str(path)], f"could not repair the worktree {path}")
            lane_repo.after_worktree_command(admin, path)


def _later(beside: bool) -> list[str]:
    """`git worktree add` makes the worktree's record and its checkout in one call, under the
    lock; `beside` leaves the checkout (every file written) to a `reset --hard` after it, with no
    lock held: git's own record is whole before any other git command reads it."""
    return ["--no-checkout"] if beside else []
