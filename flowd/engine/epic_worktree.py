"""The epic worktree (`<epic>/_epic`): registered when a run starts, checked out when it ends.

A run that finds no checked-out epic worktree registers one without a checkout (git's record and
a `.git` file on the epic branch, no index, no file: a *placeholder*), and the epic *branch* is
the epic meanwhile: every merge candidate is checked out from it and every landing moves it. When
the run ends, the merge train's last candidate worktree, already at or near the epic's head, is
moved into the placeholder's place and put on the branch, so a run writes one whole checkout of
the epic where it wrote two (in a 25,000-file repository, seconds on the path to the first merge:
docs/performance.md "A big monorepo"). Where git cannot move a worktree (one with submodules) or
the train made none, the placeholder is checked out instead. docs/merging.md "The epic worktree".
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.vcs.gitcli import run_git, unchecked_out
from flowd.vcs.gitops import Repo


def placeholder(wt: Path) -> bool:
    """The epic worktree is registered and not checked out: nothing in it is anybody's work."""
    return unchecked_out(wt)


def checked_out(wt: Path) -> bool:
    return (wt / ".git").exists() and not unchecked_out(wt)


def land(repo: Repo, wt: Path, branch: str, tip: str, base: str) -> None:
    """Move the epic from `base` to the gated `tip`, a descendant: the worktree fast-forwarded
    when it is checked out, else the branch alone (refused when it moved off `base` meanwhile)."""
    if checked_out(wt):
        repo.fast_forward(wt, tip)
    else:
        repo.move_branch(branch, tip, base)


def finish(repo: Repo, wt: Path, branch: str, slot: Path | None) -> str:
    """Check the placeholder at `wt` out on `branch`, from the candidate worktree `slot` when
    there is one (moved, then only what differs written). Returns how, for the trace."""
    if slot is not None and (slot / ".git").exists():
        try:
            repo.worktree_remove(wt, force=True)  # git's record of the placeholder, and its folder
            shutil.rmtree(wt, ignore_errors=True)
            repo.worktree_move(slot, wt)
        except FlowdError:
            if not (wt / ".git").exists():
                repo.worktree_register(wt, branch)  # as it was: checked out in full below
        else:
            for folder in (slot.parent, slot.parent.parent):  # `_train/w<n>`, then `_train`
                with contextlib.suppress(OSError):
                    folder.rmdir()
            repo.reset_worktree(wt, branch, branch)
            return "from the merge train's last candidate worktree"
    run_git(wt, ["reset", "-q", "--hard"], f"could not check out the epic worktree {wt}")
    repo.sync_submodules(wt)
    return "in full"
