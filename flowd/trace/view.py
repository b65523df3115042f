"""The fold: trace events → a run view (lanes, tasks, clones, totals).

One pure fold serves every view: the CLI's live progress, `flowd status`, and the language
server's notifications. `RunView.apply` is incremental (the server feeds events as they arrive);
`fold` runs it over a whole trace. It is pure state: how that state looks on the wire
(docs/protocol.md) is `flowd/control/shapes.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from flowd.events.model import (
    BudgetExceeded,
    Envelope,
    Event,
    ExecutorExcluded,
    ExecutorLeased,
    ExecutorReleased,
    ExecutorResumed,
    GateFlaky,
    GateResult,
    LanePlaced,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRevision,
    MergeRolledBack,
    RunEnded,
    RunStarted,
    StageStarted,
    StoryAnswered,
    StoryMerged,
    StoryPaused,
    StoryStatusChanged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
    TokensUsed,
    WorktreePrepared,
)
from flowd.events.statuses import LaneStatus, RunStatus, StoryStatus
from flowd.trace import timeline
from flowd.trace.timeline import PhaseSpan
from flowd.trace.usage import Pricer, UsageLike, reported_cost

TaskState = Literal["planned", "started", "completed"]


# The event types `RunView.apply_event` changes the view for. Every other type leaves it as it was,
# so a reader that only feeds a view may skip those lines unparsed (flowd.trace.fastfold does; a test pins
# this set against the fold).
FOLDED_TYPES: frozenset[str] = frozenset(
    cls.model_fields["type"].default
    for cls in (
        RunStarted, RunEnded, StoryStatusChanged, TasksPlanned, TaskStarted, TaskCompleted, TokensUsed,
        ExecutorLeased, ExecutorReleased, ExecutorExcluded, ExecutorResumed, BudgetExceeded,
        GateFlaky, MergeRevision,
        StoryPaused, StoryAnswered,
        LanePlaced,
        GateResult, StageStarted, StoryMerged, WorktreePrepared,
        MergeBatchStarted, MergeBatchResult, MergeBisect, MergeRolledBack,
    )
)  # fmt: skip


@dataclass
class TaskView:
    index: int
    title: str
    state: TaskState = "planned"
    satisfies: list[int] | None = None
    parallel: bool | None = None
    executor: str | None = None
    clone: int | None = None


@dataclass
class LaneView:
    lane: str
    title: str
    status: LaneStatus = "planned"
    reason: str | None = None
    executor: str | None = None
    clone: int | None = None
    current: int | None = None  # index of the task in progress
    tasks: list[TaskView] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float | None = None
    estimated: bool = False
    task_count: int = 0  # from TasksPlanned and TaskStarted.count (a plan may grow by revisions)
    flaky: int = 0  # gates of this lane green only on a rerun (docs/revisions.md)
    merge_revision: int = 0  # the merge revision round the story is in (0: none)
    node: str | None = None  # where the lane was last placed (LanePlaced; docs/scale-out.md)
    port: int | None = None  # the lane's ports (WorktreePrepared; docs/worktree-bootstrap.md)
    ports: str | None = None
    started_at: str | None = None  # first active
    ended_at: str | None = None  # done, failed or skipped
    merged_at: str | None = None
    phases: list[PhaseSpan] = field(default_factory=list)
    batch: int | None = None  # the merge train's batch it is in (docs/merging.md)

    @property
    def count(self) -> int:
        return max(self.task_count, len(self.tasks))

    @property
    def task(self) -> TaskView | None:
        if self.current is None or not 1 <= self.current <= len(self.tasks):
            return None
        return self.tasks[self.current - 1]


@dataclass(frozen=True)
class FlakyGate:
    """A `GateFlaky` event, as the report lists it."""

    lane: str | None
    where: str
    gate: str
    attempts: int


@dataclass
class BatchView:
    """One merge train batch (docs/merging.md): `ok` None while its gates run; `bisections` counts
    its bisection gate runs, `culprits` the stories found red alone."""

    batch: int
    lanes: list[str]
    base: str
    ok: bool | None = None
    duration_ms: int | None = None
    bisections: int = 0
    culprits: list[str] = field(default_factory=list)


# A lane's merge stage (`story <id>: merge`) begins when it joins the merge queue.
_MERGE_STAGE_SUFFIX = ": merge"


@dataclass
class CloneView:
    executor: str
    clone: int | None
    role: str
    label: str | None
    held: bool = True
    borrowed: bool = False

    @property
    def name(self) -> str:
        return f"{self.executor}#{self.clone}" if self.clone is not None else self.executor


@dataclass
class PauseView:
    """A pause not yet answered (docs/answers.md)."""

    reason: str
    question: str
    options: list[str] = field(default_factory=list)


@dataclass
class RunTotals:
    tokens: int = 0
    cost_usd: float | None = None
    estimated_tokens: int = 0
    unpriced_tokens: int = 0
    requests: int = 0


@dataclass
class RunView:
    run_id: str
    epic_id: str = ""
    epic_branch: str = ""
    plan: str = ""
    status: RunStatus = "running"
    started_at: str | None = None
    ended_at: str | None = None
    concurrency: int = 0
    reason: str | None = None
    budget_usd: float | None = None
    budget_exceeded: bool = False
    lanes: dict[str, LaneView] = field(default_factory=dict)
    clones: dict[str, CloneView] = field(default_factory=dict)
    exclusions: dict[str, dict[str, str | None]] = field(default_factory=dict)
    totals: RunTotals = field(default_factory=RunTotals)
    flaky_gates: list[FlakyGate] = field(default_factory=list)
    batches: list[BatchView] = field(default_factory=list)  # the merge train's (docs/merging.md)
    # Pauses not yet answered, by lane (None: the run's); what a resumed run asks again.
    pauses: dict[str | None, PauseView] = field(default_factory=dict)
    pause_on: list[str] | None = None
    # What `raise N` answers added to the epic budget and to stories' own (docs/answers.md).
    raised_usd: float = 0.0
    lane_raised_usd: dict[str, float] = field(default_factory=dict)
    # Each story's dependencies (RunStarted.dependsOn; empty for traces written before it).
    depends: dict[str, list[str]] = field(default_factory=dict)
    last_seq: int = 0
    pricer: Pricer = reported_cost

    # -- counts --------------------------------------------------------------------------------
    def count(self, status: str) -> int:
        return sum(1 for lane in self.lanes.values() if lane.status == status)

    @property
    def total(self) -> int:
        return len(self.lanes)

    @property
    def active_lanes(self) -> int:
        return self.count("active")

    @property
    def shown_status(self) -> RunStatus:
        """The run's status for people: `paused` while it is alive with only pauses left."""
        if self.status == "running" and self.pauses and self.active_lanes == 0:
            return "paused"
        return self.status

    # -- the fold ------------------------------------------------------------------------------
    def apply(self, envelope: Envelope) -> None:
        if self.accept(envelope.seq, envelope.at, envelope.run_id):
            self.apply_event(envelope.event, envelope.at)

    def accept(self, seq: int, at: str, run_id: str) -> bool:
        """The envelope part of the fold: False for a replayed line (follower restarted)."""
        if seq <= self.last_seq and run_id == self.run_id and self.last_seq:
            return False
        self.last_seq = max(self.last_seq, seq)
        if self.started_at is None:
            self.started_at = at
        return True

    def apply_event(self, event: Event, at: str | None = None) -> None:
        self._timeline(event, at)
        if isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, RunEnded):
            self.status, self.ended_at, self.reason = event.outcome, at, event.reason
            for clone in self.clones.values():
                clone.held = False
        elif isinstance(event, StoryStatusChanged):
            lane = self._lane(event.story)
            lane.status, lane.reason, lane.batch = event.status, event.reason, None
            if event.status in ("done", "failed", "skipped", "waiting", "ready"):
                lane.current = None
        elif isinstance(event, LanePlaced):
            self._lane(event.lane).node = event.node
        elif isinstance(event, WorktreePrepared):
            lane = self._lane(event.lane)
            lane.port, lane.ports = event.port, event.ports
        elif isinstance(event, TasksPlanned):
            self._planned(event)
        elif isinstance(event, TaskStarted):
            lane = self._lane(event.lane)
            task = self._task(lane, event.index, event.title)
            lane.task_count = max(lane.task_count, event.count)
            task.state, task.satisfies = "started", event.satisfies
            task.parallel, task.executor, task.clone = event.parallel, event.executor, event.clone
            if not event.parallel:
                lane.current = event.index
        elif isinstance(event, TaskCompleted):
            lane = self._lane(event.lane)
            self._task(lane, event.index, event.title).state = "completed"
            if lane.current == event.index:
                lane.current = None
        elif isinstance(event, TokensUsed):
            self.apply_tokens(event.lane, event.model, event.usage, event.estimated)
        elif isinstance(event, ExecutorLeased | ExecutorReleased):
            self.apply_lease(
                isinstance(event, ExecutorLeased),
                event.executor,
                event.clone,
                event.role,
                event.label,
                event.borrowed,
            )
        elif isinstance(event, ExecutorExcluded):
            self.exclusions[event.executor] = {"reason": event.reason, "until": event.until}
        elif isinstance(event, ExecutorResumed):
            self.exclusions.pop(event.executor, None)
        elif isinstance(event, BudgetExceeded):
            self.budget_exceeded = True
            if event.scope == "epic":
                self.budget_usd = event.limit_usd
        elif isinstance(event, GateFlaky):
            self.flaky_gates.append(FlakyGate(event.lane, event.where, event.gate, event.attempts))
            if event.lane is not None:
                self._lane(event.lane).flaky += 1
        elif isinstance(event, MergeRevision):
            self._lane(event.lane).merge_revision = event.round
        elif isinstance(
            event, StageStarted | MergeBatchStarted | MergeBatchResult | MergeBisect | MergeRolledBack
        ):
            self._train(event)
        elif isinstance(event, StoryPaused):
            self.pauses[event.lane] = PauseView(event.reason, event.question, list(event.options))
        elif isinstance(event, StoryAnswered):
            self._answered(event)

    # -- the timeline (docs/graph.md) ------------------------------------------------------------
    def _timeline(self, event: Event, at: str | None) -> None:
        """The lanes' times and phases; events without a time (tests folding bare events) skip it."""
        if at is None:
            return
        if isinstance(event, RunStarted):
            for story in event.stories:
                lane = self.lanes.get(story)
                if lane is None or not lane.phases:
                    timeline.enter(self._lane(story, event.titles).phases, "planned", at)
        elif isinstance(event, StoryStatusChanged):
            self._status_times(self._lane(event.story), event.status, at)
        elif isinstance(event, TaskStarted):
            timeline.enter(self._lane(event.lane).phases, "coding", at)
        elif isinstance(event, GateResult):
            self.apply_gate(event.lane, event.where, event.duration_ms, at)
        elif isinstance(event, StageStarted) and event.lane is not None:
            if event.stage == f"story {event.lane}{_MERGE_STAGE_SUFFIX}":
                timeline.enter(
                    self._lane(event.lane).phases, "queued", at
                )  # its turn at the merge (the train's queue)
        elif isinstance(event, MergeBatchStarted):
            for story in event.lanes:
                timeline.enter(self._lane(story).phases, "merging", at)
        elif isinstance(event, MergeRolledBack):
            timeline.enter(self._lane(event.lane).phases, "coding", at)
        elif isinstance(event, StoryMerged):
            lane = self._lane(event.lane)
            lane.merged_at = at
            timeline.enter(lane.phases, "merged", at)
        elif isinstance(event, MergeRevision):
            timeline.enter(self._lane(event.lane).phases, "coding", at)
        elif isinstance(event, StoryPaused) and event.lane is not None:
            timeline.enter(self._lane(event.lane).phases, "paused", at)
        elif isinstance(event, StoryAnswered) and event.lane is not None:
            lane = self._lane(event.lane)
            if lane.phases and lane.phases[-1].phase == "paused":
                before = [p.phase for p in lane.phases if p.phase != "paused"]
                timeline.enter(lane.phases, before[-1] if before else "coding", at)

    def _status_times(self, lane: LaneView, status: StoryStatus, at: str) -> None:
        if status == "active" and lane.started_at is None:
            lane.started_at = at
        if status in ("done", "failed", "skipped"):
            lane.ended_at = at
        phase = timeline.PHASE_OF_STATUS.get(status)
        if status == "waiting" and lane.started_at is None:
            phase = None  # never started (behind a failed dependency): its planned span just ends
            timeline.close(lane.phases, at)
        if status == "done":
            phase = "merged"
            lane.merged_at = lane.merged_at or at
        if phase is not None:
            timeline.enter(lane.phases, phase, at)
        elif status == "skipped":
            timeline.close(lane.phases, at)

    def _started(self, event: RunStarted) -> None:
        if event.depends_on is not None:
            self.depends = {k: list(v) for k, v in event.depends_on.items()}
        self.epic_id, self.epic_branch, self.plan = event.epic_id, event.epic_branch, event.plan
        self.concurrency = event.concurrency
        self.status, self.ended_at, self.reason = "running", None, None
        if event.budget_usd is not None:
            self.budget_usd = event.budget_usd
        if event.pause_on is not None:
            self.pause_on = list(event.pause_on)
        titles = event.titles or {}
        for story in event.stories:
            lane = self.lanes.setdefault(story, LaneView(lane=story, title=titles.get(story, story)))
            lane.title = titles.get(story, lane.title)
        # Leases do not survive a restart of the runner.
        self.clones = {k: c for k, c in self.clones.items() if not c.held}

    def _train(
        self, event: StageStarted | MergeBatchStarted | MergeBatchResult | MergeBisect | MergeRolledBack
    ) -> None:
        """The merge train's share of the fold: a lane is `queued` from its merge stage on,
        `merging` (with its batch) once a candidate holds it, and back to `active` when its merge
        is undone (docs/merging.md)."""
        if isinstance(event, StageStarted):
            if event.lane is not None and event.stage == f"story {event.lane}{_MERGE_STAGE_SUFFIX}":
                lane = self._lane(event.lane)
                if lane.status == "active":
                    lane.status, lane.batch = "queued", None
        elif isinstance(event, MergeBatchStarted):
            self.batches.append(BatchView(event.batch, list(event.lanes), event.base))
            for story in event.lanes:
                lane = self._lane(story)
                lane.status, lane.batch = "merging", event.batch
        elif isinstance(event, MergeRolledBack):
            lane = self._lane(event.lane)
            if lane.status in ("queued", "merging"):
                lane.status = "active"
            batch = self.batch(lane.batch) if lane.batch is not None else None
            if batch is not None and event.lane not in batch.culprits:
                batch.culprits.append(event.lane)  # red alone: its batch's culprit
            lane.batch = None
        else:
            batch = self.batch(event.batch)
            if batch is None:
                return
            if isinstance(event, MergeBatchResult):
                batch.ok, batch.duration_ms = event.ok, event.duration_ms
            else:
                batch.bisections += 1
                if event.culprit is not None and event.culprit not in batch.culprits:
                    batch.culprits.append(event.culprit)

    def batch(self, number: int) -> BatchView | None:
        return next((b for b in reversed(self.batches) if b.batch == number), None)

    def _planned(self, event: TasksPlanned) -> None:
        lane = self._lane(event.lane)
        lane.task_count = len(event.tasks)
        old = {t.index: t for t in lane.tasks}
        lane.tasks = []
        for number, planned in enumerate(event.tasks, start=1):
            previous = old.get(number)
            state: TaskState = "completed" if planned.completed else "planned"
            if previous is not None and previous.title == planned.title and previous.state == "started":
                state = "started"
            lane.tasks.append(
                TaskView(index=number, title=planned.title, state=state, satisfies=planned.satisfies)
            )

    def _answered(self, event: StoryAnswered) -> None:
        pause = self.pauses.pop(event.lane, None)
        if pause is None:
            return
        # What the runner decided, as it recorded it: the fold never reads the answer again.
        usd = event.added_usd(pause.reason)
        if usd is None:
            return
        if event.lane is None:
            self.raised_usd += usd
            self.budget_exceeded = False
            if self.budget_usd is not None:
                self.budget_usd += usd
        else:
            self.lane_raised_usd[event.lane] = self.lane_raised_usd.get(event.lane, 0.0) + usd

    def apply_lease(
        self,
        leased: bool,
        executor: str,
        clone: int | None,
        role: str,
        label: str | None,
        borrowed: bool | None,
    ) -> None:
        """An `ExecutorLeased` (leased) or `ExecutorReleased` event's share of the fold."""
        key = self._clone_key(executor, clone, label)
        if leased:
            self.clones[key] = CloneView(executor, clone, role, label, True, bool(borrowed))
            if role == "coder" and label in self.lanes and not borrowed:
                lane = self.lanes[label]
                lane.executor, lane.clone = executor, clone
            return
        if key in self.clones:
            self.clones[key].held = False
        if role == "coder" and label in self.lanes:
            lane = self.lanes[label]
            if (lane.executor, lane.clone) == (executor, clone):
                lane.executor = lane.clone = None

    def _lane(self, story: str, titles: dict[str, str] | None = None) -> LaneView:
        lane = self.lanes.get(story)
        if lane is None:
            lane = self.lanes[story] = LaneView(lane=story, title=(titles or {}).get(story, story))
        return lane

    @staticmethod
    def _task(lane: LaneView, index: int, title: str) -> TaskView:
        while len(lane.tasks) < index:
            lane.tasks.append(TaskView(index=len(lane.tasks) + 1, title=title))
        return lane.tasks[index - 1]

    @staticmethod
    def _clone_key(executor: str, clone: int | None, label: str | None) -> str:
        return f"{executor}#{clone}" if clone is not None else f"{executor}@{label or ''}"

    def apply_gate(self, lane_id: str | None, where: str, duration_ms: int, at: str) -> None:
        """A timed `GateResult` event's share of the fold (its lane's phases)."""
        if lane_id is not None:
            timeline.gate_times(self._lane(lane_id).phases, where, timeline.minus_ms(at, duration_ms), at)

    def apply_tokens(self, lane_id: str | None, model: str | None, usage: UsageLike, estimated: bool) -> None:
        """A `TokensUsed` event's share of the fold (called per line by the streaming reader)."""
        tokens = usage.total or (usage.input + usage.output)
        cost = self.pricer(model, usage)
        totals = self.totals
        totals.requests += 1
        totals.tokens += tokens
        if estimated:
            totals.estimated_tokens += tokens
        if cost is None:
            totals.unpriced_tokens += tokens
        else:
            totals.cost_usd = (totals.cost_usd or 0.0) + cost
        if lane_id is not None:
            lane = self._lane(lane_id)
            lane.tokens += tokens
            lane.estimated = lane.estimated or estimated
            if cost is not None:
                lane.cost_usd = (lane.cost_usd or 0.0) + cost


def fold(run_id: str, envelopes: Iterable[Envelope], pricer: Pricer = reported_cost) -> RunView:
    view = RunView(run_id=run_id, pricer=pricer)
    for envelope in envelopes:
        view.apply(envelope)
    return view
