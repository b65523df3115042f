"""The story failure policy: how whatever stopped a story becomes its `StoryOutcome`.

One table, first match wins (order matters: `NoExecutor` is a `FlowdError`, `BudgetHalt` a
`Halt`). A reason in `pauseOn` (a `BLOCKED_ON`, a spent budget, no executor) makes the story
`paused` instead: it waits on a person (engine/core/pause.py); so does a finished story waiting
for its approval before merge (`AwaitingApproval`, engine/core/approval.py). Otherwise three results:
`failed` (the story's fault; its dependents wait), `waiting` (not the story's fault; it resumes
on the next run) and `waiting` with `halt` set (not the story's fault and the run stops
launching). Cancellation is not in the table: a cancelled story task is the run's decision, not a
failure (see `Scheduler`).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flowd.base.errors import FlowdError, NoExecutor
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.stops import AwaitingApproval, BudgetHalt, Halt, StoryFailed, StoryWaiting

# A full disk, a quota, a file-size limit, a read-only file system: the machine's, not the story's.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


@dataclass(frozen=True)
class StoryFacts:
    """What the policy needs to know about the story that stopped."""

    story: str
    branch: str
    executors: list[str] = field(default_factory=list)
    # Reasons that wait for a person instead (engine/core/pause.py, docs/answers.md).
    pause_on: frozenset[str] = frozenset()


def _paused(facts: StoryFacts, reason: str, detail: str, *, whole_run: bool = False) -> StoryOutcome:
    return StoryOutcome(
        facts.story,
        "paused",
        reason=detail,
        branch=facts.branch,
        executors=list(facts.executors),
        pause=reason,
        pause_run=whole_run,
    )


def _failed(facts: StoryFacts, reason: str) -> StoryOutcome:
    return StoryOutcome(
        facts.story, "failed", reason=reason, branch=facts.branch, executors=list(facts.executors)
    )


def _waiting(exc: StoryWaiting, facts: StoryFacts) -> StoryOutcome:
    if "blocked" in facts.pause_on:
        return _paused(facts, "blocked", exc.reason)
    return StoryOutcome(
        facts.story, "waiting", reason=exc.reason, branch=facts.branch, executors=list(facts.executors)
    )


def _approval(exc: AwaitingApproval, facts: StoryFacts) -> StoryOutcome:
    # Raised only with `merge` in `pauseOn`: the story waits `ready` for its approval.
    return _paused(facts, "merge", exc.reason)


def _budget(exc: BudgetHalt, facts: StoryFacts) -> StoryOutcome:
    if "budget" in facts.pause_on:
        return _paused(facts, "budget", exc.reason, whole_run=exc.whole_run)
    return _halt(exc, facts)


def _halt(exc: Halt, facts: StoryFacts) -> StoryOutcome:
    return StoryOutcome(
        facts.story, "waiting", reason=f"not finished: {exc.reason}", branch=facts.branch, halt=exc.reason
    )


def _no_executor(exc: NoExecutor, facts: StoryFacts) -> StoryOutcome:
    if "noExecutor" in facts.pause_on:
        return _paused(facts, "noExecutor", str(exc))
    # No branch: the story may not have one yet, and nothing of it is worth reporting.
    return StoryOutcome(facts.story, "waiting", reason=f"not finished: {exc}", halt=str(exc))


def _story_failed(exc: StoryFailed, facts: StoryFacts) -> StoryOutcome:
    return _failed(facts, exc.reason)


def _flowd_error(exc: FlowdError, facts: StoryFacts) -> StoryOutcome:
    return _failed(facts, str(exc))


def _os_error(exc: OSError, facts: StoryFacts) -> StoryOutcome:
    if exc.errno not in DISK_FULL:
        return _failed(facts, str(exc))
    # Not the story's fault: it stops resumable, and the run stops launching.
    where = f" {exc.filename}" if exc.filename else ""
    why = f"could not write{where} ({exc.strerror}); free some space, then run again"
    return StoryOutcome(facts.story, "waiting", reason=f"not finished: {why}", branch=facts.branch, halt=why)


def _anything(exc: Exception, facts: StoryFacts) -> StoryOutcome:
    # An agent error or a bug: the story fails, the run goes on.
    return _failed(facts, str(exc) or type(exc).__name__)


# Each rule takes the exception of its row's type.
Rule = Callable[[Any, StoryFacts], StoryOutcome]

POLICY: tuple[tuple[type[Exception], Rule], ...] = (
    (AwaitingApproval, _approval),
    (StoryWaiting, _waiting),
    (BudgetHalt, _budget),
    (Halt, _halt),
    (NoExecutor, _no_executor),
    (StoryFailed, _story_failed),
    (FlowdError, _flowd_error),
    (OSError, _os_error),
    (Exception, _anything),
)


def outcome_of(exc: Exception, facts: StoryFacts) -> StoryOutcome:
    """The outcome of a story stopped by `exc` (the first rule of `POLICY` whose type matches)."""
    for kind, rule in POLICY:
        if isinstance(exc, kind):
            return rule(exc, facts)
    raise AssertionError("POLICY ends with Exception")  # pragma: no cover
