"""The resume decision as tables: saved state and branch facts → what to do; no git."""

from __future__ import annotations

import pytest

from flowd.engine.core.resume import OnFreshBranch, OnState, merged_before_stop, on_fresh_branch, on_state
from flowd.engine.state import StoryState


def state(status: str, digest: str = "h1") -> StoryState:
    return StoryState.model_validate(
        {"id": "s", "hash": digest, "branch": "story/ep/s", "worktree": "/w/s", "status": status}
    )


@pytest.mark.parametrize(
    ("saved", "expected"),
    [
        (None, OnState.START),
        (state("started"), OnState.RESUME),
        (state("failed"), OnState.RESUME),
        (state("merged"), OnState.MERGED),
        (state("started", digest="old"), OnState.START_OVER),
        (state("failed", digest="old"), OnState.START_OVER),
        # a changed plan entry wins over a merge: the story runs again from the new entry
        (state("merged", digest="old"), OnState.START_OVER),
    ],
)
def test_on_state(saved: StoryState | None, expected: OnState) -> None:
    assert on_state(saved, "h1") is expected


@pytest.mark.parametrize(
    ("exists", "in_epic", "expected"),
    [
        (False, False, OnFreshBranch.NEW),
        (False, True, OnFreshBranch.NEW),  # no branch: containment means nothing
        (True, True, OnFreshBranch.DISCARD),
        (True, False, OnFreshBranch.REUSE),
    ],
)
def test_on_fresh_branch(exists: bool, in_epic: bool, expected: OnFreshBranch) -> None:
    assert on_fresh_branch(exists, in_epic) is expected


@pytest.mark.parametrize(("exists", "in_epic"), [(True, True), (True, False), (False, False)])
def test_a_branch_made_ahead_by_this_run_is_the_storys_start(exists: bool, in_epic: bool) -> None:
    # Not discarded as a killed run's leftover, nor kept as work: reset in place (engine/ahead.py).
    assert on_fresh_branch(exists, in_epic, made_ahead=True) is OnFreshBranch.NEW


@pytest.mark.parametrize(
    ("base", "head", "in_epic", "expected"),
    [
        ("b0", "h9", True, True),  # moved and contained: merged just before the kill
        ("b0", "h9", False, False),  # moved, not in the epic: resume the work
        ("b0", "b0", True, False),  # never moved: nothing of its own was merged
        (None, "h9", True, False),  # no recorded base (an older state): proves nothing
    ],
)
def test_merged_before_stop(base: str | None, head: str, in_epic: bool, expected: bool) -> None:
    assert merged_before_stop(base, head, in_epic) is expected
