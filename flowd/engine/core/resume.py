"""The resume decision: what a story's saved state and its branch say to do when it starts.

Three small decisions, each over facts the shell gathered from the state file and git, so the
shell asks git only what the next decision needs (docs/architecture.md: one story, prepare):

1. `on_state`: the saved state against the plan entry's hash.
2. `on_fresh_branch`: no usable state, but maybe a branch (a run killed before saving its state).
3. `merged_before_stop`: a started or failed story whose branch the epic may already contain.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol


class SavedState(Protocol):
    """What the decision reads of a story's state file (`engine/state.py`'s `StoryState`)."""

    @property
    def hash(self) -> str: ...

    @property
    def status(self) -> str: ...


class OnState(Enum):
    START = "start"  # no state: a new story
    START_OVER = "start over"  # the plan entry changed: discard the old branch and worktree, then start
    MERGED = "merged"  # merged on a previous run: finish its clean-up, skip it
    RESUME = "resume"  # started or failed with the same plan entry: go on where it stopped


def on_state(state: SavedState | None, digest: str) -> OnState:
    if state is None:
        return OnState.START
    if state.hash != digest:
        return OnState.START_OVER
    if state.status == "merged":
        return OnState.MERGED
    return OnState.RESUME


class OnFreshBranch(Enum):
    NEW = "new"  # no branch, or one this run made ahead: (re)made at the epic head
    DISCARD = "discard"  # a branch the epic already contains: nothing of it to keep, start afresh
    REUSE = "reuse"  # a branch with work the epic lacks: keep it


def on_fresh_branch(branch_exists: bool, contained_in_epic: bool, made_ahead: bool = False) -> OnFreshBranch:
    """`made_ahead`: this run made the branch and its worktree before the story launched
    (engine/ahead.py): they are its start, moved to the epic head in place."""
    if not branch_exists or made_ahead:
        return OnFreshBranch.NEW
    return OnFreshBranch.DISCARD if contained_in_epic else OnFreshBranch.REUSE


def merged_before_stop(base: str | None, head: str, contained_in_epic: bool) -> bool:
    """A resumed branch that moved since it started and that the epic contains was merged just
    before the previous runner stopped: record it merged, never merge it twice. A branch with no
    recorded base, or with no commits of its own, proves nothing."""
    return base is not None and head != base and contained_in_epic
