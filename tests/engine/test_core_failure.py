"""The story failure policy as a table: whatever stopped a story → its outcome; no git, no agents."""

from __future__ import annotations

import errno

import pytest

from flowd.base.errors import FlowdError, InputError, NoExecutor
from flowd.engine.core.failure import POLICY, StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.stops import BudgetHalt, Halt, StoryFailed, StoryWaiting

FACTS = StoryFacts("s1", "story/ep/s1", ["claude", "codex"])
FREE = "free some space, then run again"


def failed(reason: str) -> StoryOutcome:
    return StoryOutcome("s1", "failed", reason=reason, branch="story/ep/s1", executors=["claude", "codex"])


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            StoryWaiting("blocked on the api story"),
            StoryOutcome(
                "s1",
                "waiting",
                reason="blocked on the api story",
                branch="story/ep/s1",
                executors=["claude", "codex"],
            ),
        ),
        (
            Halt("the epic budget of $1.00 is spent ($1.20)"),
            StoryOutcome(
                "s1",
                "waiting",
                reason="not finished: the epic budget of $1.00 is spent ($1.20)",
                branch="story/ep/s1",
                halt="the epic budget of $1.00 is spent ($1.20)",
            ),
        ),
        (
            NoExecutor("coder", "no executor can take the coder role"),
            StoryOutcome(
                "s1",
                "waiting",
                reason="not finished: no executor can take the coder role",
                halt="no executor can take the coder role",
            ),
        ),
        (StoryFailed("review rounds exhausted"), failed("review rounds exhausted")),
        (FlowdError("git merge failed"), failed("git merge failed")),
        (InputError("bad setup command"), failed("bad setup command")),
        (OSError(errno.EACCES, "Permission denied", "/x"), failed("[Errno 13] Permission denied: '/x'")),
        (
            OSError(errno.ENOSPC, "No space left on device", "/w/a.py"),
            StoryOutcome(
                "s1",
                "waiting",
                reason=f"not finished: could not write /w/a.py (No space left on device); {FREE}",
                branch="story/ep/s1",
                halt=f"could not write /w/a.py (No space left on device); {FREE}",
            ),
        ),
        (
            OSError(errno.EDQUOT, "Disk quota exceeded"),
            StoryOutcome(
                "s1",
                "waiting",
                reason=f"not finished: could not write (Disk quota exceeded); {FREE}",
                branch="story/ep/s1",
                halt=f"could not write (Disk quota exceeded); {FREE}",
            ),
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro"),
            StoryOutcome(
                "s1",
                "waiting",
                reason=f"not finished: could not write /ro (Read-only file system); {FREE}",
                branch="story/ep/s1",
                halt=f"could not write /ro (Read-only file system); {FREE}",
            ),
        ),
        (RuntimeError("agent crashed"), failed("agent crashed")),
        (KeyError("x"), failed("'x'")),
        (ValueError(), failed("ValueError")),  # no message: the type names it
    ],
)
def test_policy(exc: Exception, expected: StoryOutcome) -> None:
    assert outcome_of(exc, FACTS) == expected


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS])
def test_every_full_disk_halts_the_run(code: int) -> None:
    out = outcome_of(OSError(code, "full"), FACTS)
    assert out.status == "waiting" and out.halt is not None and out.executors == []


def test_the_outcome_owns_its_executor_list() -> None:
    out = outcome_of(StoryFailed("x"), FACTS)
    out.executors.append("other")
    assert FACTS.executors == ["claude", "codex"]


def test_no_executor_is_matched_before_the_flowd_errors_it_belongs_to() -> None:
    kinds = [kind for kind, _ in POLICY]
    assert issubclass(NoExecutor, FlowdError)
    assert kinds.index(NoExecutor) < kinds.index(FlowdError)
    assert kinds[-1] is Exception


PAUSING = StoryFacts("s1", "story/ep/s1", ["claude"], pause_on=frozenset({"budget", "blocked", "noExecutor"}))


@pytest.mark.parametrize(
    ("exc", "pause", "whole_run"),
    [
        (StoryWaiting("blocked on unplanned work: x.py"), "blocked", False),
        (BudgetHalt("the epic budget of $1.00 is spent ($1.20)", whole_run=True), "budget", True),
        (BudgetHalt("the story budget of $0.50 is spent ($0.60)", whole_run=False), "budget", False),
        (NoExecutor("coder", "no executor can take the coder role"), "noExecutor", False),
    ],
)
def test_a_reason_in_pause_on_pauses_the_story(exc: Exception, pause: str, whole_run: bool) -> None:
    outcome = outcome_of(exc, PAUSING)
    assert (outcome.status, outcome.pause, outcome.pause_run) == ("paused", pause, whole_run)
    assert outcome.reason == str(exc) and outcome.halt is None


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (BudgetHalt("the epic budget of $1.00 is spent ($1.20)", whole_run=True), "waiting"),
        (Halt("the epic worktree is dirty"), "waiting"),  # a halt that is no budget never pauses
        (StoryFailed("red gates"), "failed"),
    ],
)
def test_without_its_reason_in_pause_on_nothing_pauses(exc: Exception, status: str) -> None:
    facts = StoryFacts("s1", "story/ep/s1", pause_on=frozenset({"blocked"}))
    assert outcome_of(exc, facts).status == status
    assert outcome_of(Halt("x"), PAUSING).status == "waiting"
