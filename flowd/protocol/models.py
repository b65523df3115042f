"""The shapes of flowd's custom protocol (docs/protocol.md), one pydantic model each.

Python names are snake_case, the wire camelCase (`WireModel`). A model's class name is also its
TypeScript name in the generated `editors/vscode/src/protocol.ts`. Params a client sends are
strict (an unknown key is a typo worth a -32602); shapes the server sends are strict too, so a
misspelt field fails where it is built rather than reaching the editor.

`Optional` fields are absent on the wire when unset, except those made with `nullable()` in a
`NullableShape`, which `flow/status` sends as `null` (the generated TypeScript says `| null` only
for those).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    RootModel,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from flowd.base.wire import WireModel
from flowd.events.statuses import LaneStatus, RunStatus

_STRICT = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", defer_build=True)


_NULLABLE: JsonDict = {"nullable": True}


def nullable() -> Any:
    """A field `flow/status` sends as `null` when unknown (rather than leaving it out)."""
    return Field(default=None, json_schema_extra=_NULLABLE)


class Shape(WireModel):
    """What the server sends: a notification's params or a request's result."""

    model_config = _STRICT


class NullableShape(Shape):
    """A shape whose `nullable()` fields are sent as `null` when unknown, even where every other
    unset field is left out (`exclude_none`, as `wire()` dumps)."""

    @model_serializer(mode="wrap")
    def _keep_nulls(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        out = handler(self)
        if not info.exclude_none:
            return out
        fields = type(self).model_fields
        if all(f.json_schema_extra != _NULLABLE or getattr(self, n) is not None for n, f in fields.items()):
            return out
        kept: dict[str, Any] = {}
        for name, field in fields.items():  # in declaration order, as the plain dump
            key = (field.alias or to_camel(name)) if info.by_alias else name
            if key in out:
                kept[key] = out[key]
            elif field.json_schema_extra == _NULLABLE and getattr(self, name) is None:
                kept[key] = None
        return kept


class Params(WireModel):
    """What a client sends. LSP's generic progress tokens are accepted on every request."""

    model_config = _STRICT

    work_done_token: int | str | None = None
    partial_result_token: int | str | None = None


# -- commands ----------------------------------------------------------------------------------
class LaunchArgs(Params):
    plan: str = Field(min_length=1)
    concurrency: int | None = Field(default=None, ge=1)
    fail_fast: bool | None = None
    budget_usd: float | None = Field(default=None, gt=0)
    # What waits for an answer instead of halting (docs/answers.md); absent: `pauseOn` in config.
    pause_on: list[Literal["budget", "blocked", "noExecutor", "merge"]] | None = None


class LaunchResult(Shape):
    run_id: str
    epic_id: str
    epic_branch: str


class CancelArgs(Params):
    run_id: str = Field(min_length=1)


class CancelResult(Shape):
    run_id: str
    outcome: str


class ResumeArgs(Params):
    """Exactly one of `runId` (a run to go on with) or `plan` (the newest run of that plan)."""

    run_id: str | None = Field(default=None, min_length=1)
    plan: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> ResumeArgs:
        if (self.run_id is None) == (self.plan is None):
            raise ValueError("give exactly one of runId or plan")
        return self


class AnswerArgs(Params):
    """`flow.answer`: answer the pause of `story` (absent: the run's own, the budget)."""

    run_id: str = Field(min_length=1)
    story: str | None = Field(default=None, min_length=1)
    answer: str = Field(min_length=1)


class AnswerResult(Shape):
    run_id: str
    story: str | None = None
    message: str


class ValidateArgs(Params):
    plan: str = Field(min_length=1)


class ValidateResult(Shape):
    violations: list[str]


class AddRevisionArgs(Params):
    """A review comment on `line` (from 1, as editors show it) of the file `uri` (a `file://` URI,
    an absolute path, or a path relative to the repository) for story `story` of run `runId`."""

    run_id: str = Field(min_length=1)
    story: str = Field(min_length=1)
    uri: str = Field(min_length=1)
    line: int = Field(ge=1)
    text: str = Field(min_length=1)


class AddRevisionResult(Shape):
    """The story took the comment: where it is, as the run recorded it, and when it runs."""

    run_id: str
    story: str
    path: str
    line: int
    message: str


# -- notifications -----------------------------------------------------------------------------
class RunParams(Shape):
    run_id: str
    epic_id: str
    status: RunStatus
    done: int
    failed: int
    skipped: int
    total: int
    # Where the run's things are (flowd/base/layout.py), so editors never build these names:
    # the epic's branch, and the absolute paths of its report (Markdown, JSON), which may not
    # exist yet (written at the end of every run).
    epic_branch: str | None = None
    report_markdown: str | None = None
    report_json: str | None = None


class LaneTask(Shape):
    index: int
    count: int
    title: str


class LaneParams(Shape):
    run_id: str
    lane: str
    title: str
    status: LaneStatus
    executor: str | None = None
    clone: int | None = None
    task: LaneTask | None = None
    tokens: int
    cost_usd: float | None = None
    estimated: bool
    reason: str | None = None
    # docs/revisions.md: gates green only on a rerun, and the merge revision round (absent: none).
    flaky: int | None = None
    merge_revision: int | None = None
    node: str | None = None  # where the lane runs when `[lanes] engine = "ray"` (docs/scale-out.md)
    # The lane's ports, FLOWD_PORT and FLOWD_PORTS "first-last" (docs/worktree-bootstrap.md).
    port: int | None = None
    ports: str | None = None
    # The merge train's batch while `status` is `queued`/`merging` in one (docs/merging.md).
    batch: int | None = None
    # The story's worktree (absolute; it may not exist yet, or any more), its branch, and its
    # findings file (absolute; written once there are findings), from flowd/base/layout.py.
    worktree: str | None = None
    branch: str | None = None
    findings: str | None = None


class TaskState(StrEnum):
    PLANNED = "planned"
    STARTED = "started"
    COMPLETED = "completed"


class TaskParams(Shape):
    run_id: str
    lane: str
    index: int
    count: int
    title: str
    state: TaskState
    satisfies: list[int] | None = None
    parallel: bool | None = None
    executor: str | None = None
    clone: int | None = None


class CloneState(StrEnum):
    LEASED = "leased"
    RELEASED = "released"
    EXCLUDED = "excluded"
    RESUMED = "resumed"


class CloneParams(Shape):
    run_id: str
    executor: str
    clone: int | None = None
    role: str
    label: str | None = None
    state: CloneState
    reason: str | None = None
    until: str | None = None


class CostParams(Shape):
    run_id: str
    tokens: int
    cost_usd: float | None = None
    estimated_tokens: int
    unpriced_tokens: int
    budget_usd: float | None = None


class AttentionParams(Shape):
    """`flow/attention`: something needs a person, or no longer does (`cleared`).

    `reason`: paused, blocked, failed, budget, repaired (a perimeter repair undid changes),
    escaped (a lane's process wrote past its story, docs/sandbox-detection.md), unconfined (the
    run's lanes are not confined, docs/sandbox.md), cleared.
    The server always sends `actions` (empty when there is nothing to answer)."""

    run_id: str
    lane: str | None = None
    reason: str
    message: str
    actions: list[str] = Field(default_factory=list)
    paths: list[str] | None = None


# -- requests ----------------------------------------------------------------------------------
class StatusParams(Params):
    pass


class RunTotals(Shape):
    tokens: int | None = None
    cost_usd: float | None = None
    estimated_tokens: int | None = None
    unpriced_tokens: int | None = None
    budget_usd: float | None = None
    requests: int | None = None


class HeldClone(NullableShape):
    executor: str
    clone: int | None = nullable()
    role: str
    label: str | None = nullable()


class Exclusion(NullableShape):
    executor: str
    reason: str | None = nullable()
    until: str | None = nullable()


class StatusRun(NullableShape):
    run_id: str
    epic_id: str
    status: RunStatus
    started_at: str | None = nullable()
    ended_at: str | None = nullable()
    plan: str | None = None
    epic_branch: str | None = None
    report_markdown: str | None = None  # as `flow/run` sends them
    report_json: str | None = None
    lanes: list[LaneParams]
    totals: RunTotals | None = None
    clones: list[HeldClone] | None = None
    exclusions: list[Exclusion] | None = None


class StatusResult(Shape):
    runs: list[StatusRun]


class CostReportParams(Params):
    run_id: str | None = None
    since: str | None = None
    until: str | None = None
    time_zone: str | None = None
    format: Literal["json", "text", "markdown"] = "json"


class CostReportResult(Shape):
    """The cost report of `flowd cost --json` (docs/cost.md), or `{text}` for text and markdown."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None


class PerimeterParams(Params):
    uri: str | None = Field(default=None, min_length=1)


class PerimeterOwner(Shape):
    story: str
    run_id: str | None = None
    status: LaneStatus | None = None


class PerimeterOfFile(Shape):
    path: str
    owner: PerimeterOwner | None = None
    shared_read_only_by: list[str]


class PerimeterViolationItem(Shape):
    uri: str
    story: str | None = None
    run_id: str | None = None
    code: str | None = None
    message: str


class PerimeterViolations(Shape):
    violations: list[PerimeterViolationItem]


class PerimeterResult(RootModel[PerimeterOfFile | PerimeterViolations]):
    """With `uri`: who owns that file; without: every perimeter diagnostic now shown."""


# -- the epic graph and timeline (docs/graph.md) ---------------------------------------------
class GraphParams(Params):
    run_id: str = Field(min_length=1)


class GraphStory(Shape):
    """A node: the story's status as `flow/lane` sends it, its edges, its times, and whether it is
    on the critical path (the chain of dependents the epic's length hangs on)."""

    id: str
    title: str
    status: LaneStatus
    depends_on: list[str]
    lane: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    merged_at: str | None = None
    critical: bool


class GraphBatch(Shape):
    """A merge train batch: the lanes gated together on the epic, and (once known) whether they passed."""

    batch: int
    lanes: list[str]
    ok: bool | None = None


class GraphResult(Shape):
    stories: list[GraphStory]
    batches: list[GraphBatch]


class TimelineParams(Params):
    run_id: str = Field(min_length=1)


class TimelinePhase(Shape):
    """planned, coding, gated, queued, merging, merged, paused or failed, from `start` to `end`
    (absent: it lasts; merged and failed are points, `end` = `start`)."""

    phase: str
    start: str
    end: str | None = None


class TimelineLane(Shape):
    lane: str
    title: str
    status: LaneStatus
    phases: list[TimelinePhase]


class TimelineResult(Shape):
    started_at: str | None = None
    ended_at: str | None = None
    lanes: list[TimelineLane]
