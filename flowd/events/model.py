"""The event union of the trace (docs/trace.md) and its envelope.

Events are pydantic models discriminated on `type`. Readers skip lines they cannot parse and types
they do not know (`parse_line` returns None for both), so old readers survive new writers.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from flowd.base.jsonl import JSONError, dumps, loads
from flowd.base.wire import WireModel
from flowd.events.statuses import RunOutcome as RunOutcome
from flowd.events.statuses import StoryStatus as StoryStatus

PerimeterKind = Literal["outside", "sharedReadOnly", "foreignOwned"]
PerimeterAction = Literal["flagged", "restored", "failed"]
GateWhere = Literal["task", "epic", "baseline"]
# docs/sandbox-detection.md: the kind of place a lane wrote (or read) past its story, and what came of it.
# `gitObjects`, `gitDir`, `signal` and `socket` are the sealed lanes' (docs/sandbox.md).
EscapeWhat = Literal[
    "checkout",
    "home",
    "gitConfig",
    "gitHooks",
    "gitRef",
    "gitObjects",
    "gitDir",
    "flowState",
    "otherLane",
    "secret",
    "signal",
    "socket",
    "outside",
]
EscapeAction = Literal["denied", "undone", "reported"]


class Usage(WireModel):
    """One turn's tokens. `input` counts every input token, cache reads and writes included."""

    input: int = 0
    output: int = 0
    total: int = 0
    cached_read: int | None = None
    cache_write: int | None = None
    cost_usd: float | None = None


class PlannedTask(WireModel):
    title: str
    completed: bool = False
    satisfies: list[int] | None = None
    depends_on: list[int] | None = None
    owns: list[str] | None = None


class PerimeterPath(WireModel):
    path: str
    kind: PerimeterKind


class JudgeIssue(WireModel):
    severity: Literal["critical", "major", "minor"]
    title: str
    description: str = ""


class RunStarted(WireModel):
    type: Literal["RunStarted"] = "RunStarted"
    epic_id: str
    epic_branch: str
    plan: str
    stories: list[str]
    concurrency: int
    # Useful to every view, yet optional: readers must not require them (docs/trace.md).
    titles: dict[str, str] | None = None
    budget_usd: float | None = None
    # What waits for an answer instead of halting (docs/answers.md); a resumed run keeps it.
    pause_on: list[str] | None = None
    # Each story's dependencies, for the epic graph (docs/graph.md); absent in older traces.
    depends_on: dict[str, list[str]] | None = None


class RunEnded(WireModel):
    type: Literal["RunEnded"] = "RunEnded"
    outcome: RunOutcome
    done: int
    failed: int
    skipped: int
    reason: str | None = None


class StoryStatusChanged(WireModel):
    type: Literal["StoryStatusChanged"] = "StoryStatusChanged"
    story: str
    status: StoryStatus
    reason: str | None = None


class TasksPlanned(WireModel):
    type: Literal["TasksPlanned"] = "TasksPlanned"
    lane: str
    tasks: list[PlannedTask]


class TaskStarted(WireModel):
    type: Literal["TaskStarted"] = "TaskStarted"
    lane: str
    index: int
    count: int
    title: str
    satisfies: list[int] | None = None
    parallel: bool | None = None
    executor: str | None = None
    clone: int | None = None


class TaskCompleted(WireModel):
    type: Literal["TaskCompleted"] = "TaskCompleted"
    lane: str
    index: int
    count: int
    title: str


class StageStarted(WireModel):
    type: Literal["StageStarted"] = "StageStarted"
    stage: str
    lane: str | None = None


class StageCompleted(WireModel):
    type: Literal["StageCompleted"] = "StageCompleted"
    stage: str
    lane: str | None = None


class StageFailed(WireModel):
    type: Literal["StageFailed"] = "StageFailed"
    stage: str
    lane: str | None = None
    error: str | None = None


class ToolUse(WireModel):
    type: Literal["ToolUse"] = "ToolUse"
    lane: str | None = None
    executor: str | None = None
    tool: str
    args: Any = None
    parent: str | None = None


class AssistantMessage(WireModel):
    type: Literal["AssistantMessage"] = "AssistantMessage"
    lane: str | None = None
    agent: str
    text: str


class TokensUsed(WireModel):
    type: Literal["TokensUsed"] = "TokensUsed"
    lane: str | None = None
    executor: str | None = None
    clone: int | None = None
    agent: str
    model: str | None = None
    usage: Usage
    estimated: bool = False


class ExecutorLeased(WireModel):
    type: Literal["ExecutorLeased"] = "ExecutorLeased"
    executor: str
    clone: int | None = None
    role: str
    label: str | None = None
    borrowed: bool | None = None


class ExecutorReleased(WireModel):
    type: Literal["ExecutorReleased"] = "ExecutorReleased"
    executor: str
    clone: int | None = None
    role: str
    label: str | None = None
    borrowed: bool | None = None


class ExecutorExcluded(WireModel):
    type: Literal["ExecutorExcluded"] = "ExecutorExcluded"
    executor: str
    reason: str
    until: str | None = None


class ExecutorResumed(WireModel):
    type: Literal["ExecutorResumed"] = "ExecutorResumed"
    executor: str
    reason: str
    until: str | None = None


class ExecutorHandedOver(WireModel):
    type: Literal["ExecutorHandedOver"] = "ExecutorHandedOver"
    from_: str = Field(alias="from")
    to: str
    role: str
    label: str | None = None
    reason: str


class GateResult(WireModel):
    type: Literal["GateResult"] = "GateResult"
    lane: str | None = None
    where: GateWhere
    gate: str
    ok: bool
    exit_code: int
    duration_ms: int


class GateFlaky(WireModel):
    """A red gate that passed when run again (docs/revisions.md): not charged to the story."""

    type: Literal["GateFlaky"] = "GateFlaky"
    lane: str | None = None
    where: GateWhere
    gate: str
    attempts: int  # red runs before the green one


class PerimeterViolation(WireModel):
    type: Literal["PerimeterViolation"] = "PerimeterViolation"
    lane: str
    paths: list[PerimeterPath]
    action: PerimeterAction


class TaskOwnsViolation(WireModel):
    type: Literal["TaskOwnsViolation"] = "TaskOwnsViolation"
    lane: str
    task: str
    paths: list[str]


class MergeRevision(WireModel):
    """The epic gates were red on the story's merge (undone): it reopens with a revision task."""

    type: Literal["MergeRevision"] = "MergeRevision"
    lane: str
    round: int
    gate: str
    output: str  # the gate's output, truncated


class StoryMerged(WireModel):
    type: Literal["StoryMerged"] = "StoryMerged"
    lane: str
    branch: str
    commit: str


class MergeRolledBack(WireModel):
    type: Literal["MergeRolledBack"] = "MergeRolledBack"
    lane: str
    reason: str


class MergeBatchStarted(WireModel):
    """The merge train gates a candidate (docs/merging.md): `lanes` merged in this order onto `base`
    (the epic commit it builds on; a speculative candidate builds on the one in flight)."""

    type: Literal["MergeBatchStarted"] = "MergeBatchStarted"
    batch: int
    lanes: list[str]
    base: str


class MergeBatchResult(WireModel):
    """The epic gates' verdict on a batch's candidate, reruns included (docs/merging.md)."""

    type: Literal["MergeBatchResult"] = "MergeBatchResult"
    batch: int
    ok: bool
    duration_ms: int


class MergeBisect(WireModel):
    """A red batch is bisected (docs/merging.md): `lanes` are gated next on their own; `culprit`
    names a story found red alone (then `lanes` is just it)."""

    type: Literal["MergeBisect"] = "MergeBisect"
    batch: int
    lanes: list[str]
    culprit: str | None = None


class StoryJudged(WireModel):
    type: Literal["StoryJudged"] = "StoryJudged"
    lane: str
    round: int
    clean: bool
    issues: list[JudgeIssue]


class BudgetExceeded(WireModel):
    type: Literal["BudgetExceeded"] = "BudgetExceeded"
    scope: Literal["epic", "story"]
    lane: str | None = None
    limit_usd: float
    spent_usd: float


class WorktreePrepared(WireModel):
    """A story worktree got the user's ignored files and its lane's ports (docs/worktree-bootstrap.md)."""

    type: Literal["WorktreePrepared"] = "WorktreePrepared"
    lane: str
    copied: list[str]
    port: int
    ports: str  # "first-last"


class StoryPaused(WireModel):
    """A story (or, with no lane, the whole run) waits on a person (docs/answers.md)."""

    type: Literal["StoryPaused"] = "StoryPaused"
    lane: str | None = None
    reason: Literal["budget", "blocked", "noExecutor", "merge"]
    question: str
    options: list[str] = []


AnswerEffect = Literal["approve", "revise", "raise", "tell", "wait", "stop"]


class StoryAnswered(WireModel):
    """The answer that ended a pause of `lane` (none: the run's).

    `effect` is what the runner decided the answer does (engine/core/pause.py, approval.py), and
    `raiseUsd` the USD a `raise` added, so readers never read the answer again; both absent in
    traces written before they existed (readers then read `answer` as the runner did)."""

    type: Literal["StoryAnswered"] = "StoryAnswered"
    lane: str | None = None
    answer: str
    by: Literal["editor", "cli"]
    effect: AnswerEffect | None = None
    raise_usd: float | None = None

    def added_usd(self, reason: str) -> float | None:
        """The USD this answer to a pause of `reason` added to a budget: the recorded effect's; in a
        trace written before effects were recorded, a `raise N` to a budget pause read as the
        runner read it then. That old reading is frozen here, not asked of today's pause rules, so
        an old trace folds the same whatever they become (the view checkpoint never hashes them)."""
        if self.effect is not None:
            return self.raise_usd if self.effect == "raise" else None
        match = _LEGACY_RAISE.match(self.answer.strip())
        if reason != "budget" or match is None:
            return None  # the runner records only answers it took: no other one raised anything
        try:
            usd = float(match[1])
        except ValueError:
            return None
        return usd if math.isfinite(usd) and usd > 0 else None


# `raise N` (`$N` too) as engine/core/pause.py read it when StoryAnswered had no `effect`.
_LEGACY_RAISE = re.compile(r"^raise\s+\$?(\S+)$", re.IGNORECASE)


class RevisionRequested(WireModel):
    """A review comment on a line of a story's change that became a revision task (docs/answers.md).

    `id` names the revision in its task (so a resumed run knows whether it was taken) and `quote`
    is the line as it read when the comment was made; both optional for readers."""

    type: Literal["RevisionRequested"] = "RevisionRequested"
    lane: str
    path: str
    line: int
    text: str
    by: Literal["editor", "cli"]
    id: str | None = None
    quote: str | None = None


class LanePlaced(WireModel):
    """Where a story lane runs: `engine` "local" or "ray", `node` the host (or Ray node) it was placed on."""

    type: Literal["LanePlaced"] = "LanePlaced"
    lane: str
    engine: Literal["local", "ray"]
    node: str


class LaneEscape(WireModel):
    """A lane's process reached past its story (docs/sandbox-detection.md): `denied` by the OS,
    `undone` (found after the fact and put back) or `reported` (found, could not be put back)."""

    type: Literal["LaneEscape"] = "LaneEscape"
    lane: str
    path: str
    what: EscapeWhat
    action: EscapeAction


class Info(WireModel):
    type: Literal["Info"] = "Info"
    lane: str | None = None
    message: str


Event = Annotated[
    RunStarted
    | RunEnded
    | StoryStatusChanged
    | TasksPlanned
    | TaskStarted
    | TaskCompleted
    | StageStarted
    | StageCompleted
    | StageFailed
    | ToolUse
    | AssistantMessage
    | TokensUsed
    | ExecutorLeased
    | ExecutorReleased
    | ExecutorExcluded
    | ExecutorResumed
    | ExecutorHandedOver
    | GateResult
    | PerimeterViolation
    | TaskOwnsViolation
    | StoryMerged
    | MergeRolledBack
    | StoryJudged
    | BudgetExceeded
    | WorktreePrepared
    | GateFlaky
    | MergeRevision
    | StoryPaused
    | StoryAnswered
    | RevisionRequested
    | LanePlaced
    | MergeBatchStarted
    | MergeBatchResult
    | MergeBisect
    | LaneEscape
    | Info,
    Field(discriminator="type"),
]

EVENT_CLASSES: dict[str, type[WireModel]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        RunStarted, RunEnded, StoryStatusChanged, TasksPlanned, TaskStarted, TaskCompleted,
        StageStarted, StageCompleted, StageFailed, ToolUse, AssistantMessage, TokensUsed,
        ExecutorLeased, ExecutorReleased, ExecutorExcluded, ExecutorResumed, ExecutorHandedOver,
        GateResult, PerimeterViolation, TaskOwnsViolation, StoryMerged, MergeRolledBack,
        StoryJudged, BudgetExceeded, StoryPaused, StoryAnswered, Info,
        WorktreePrepared, GateFlaky, MergeRevision, RevisionRequested, LanePlaced,
        MergeBatchStarted, MergeBatchResult, MergeBisect,
        LaneEscape,
    )
}  # fmt: skip
EVENT_TYPES: frozenset[str] = frozenset(EVENT_CLASSES)


class Envelope(WireModel):
    """One trace line: `{"v": 1, "seq", "at", "runId", "event"}`."""

    v: Literal[1] = 1
    seq: int
    at: str
    run_id: str
    event: Event


@cache
def _envelope() -> TypeAdapter[Envelope]:
    return TypeAdapter(Envelope)  # built on first use (docs/performance.md: start-up)


def parse_line(line: bytes | str) -> Envelope | None:
    """One trace line to an envelope; None for a line that does not parse or an unknown type."""
    try:
        raw = loads(line)
    except JSONError:
        return None
    return envelope_from_dict(raw)


def envelope_from_dict(raw: object) -> Envelope | None:
    """A parsed trace line (JSON value) to an envelope; None as for `parse_line`."""
    if not isinstance(raw, dict):
        return None
    event = raw.get("event")
    if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES:
        return None
    try:
        return _envelope().validate_python(raw)
    except ValidationError:
        return None


def dump_envelope(envelope: Envelope) -> bytes:
    """The trace line for an envelope, without the newline."""
    return dumps(envelope.model_dump(mode="json", by_alias=True, exclude_none=True))
