"""What every part of a run shares: repository, plan, settings, roster pool, trace, live view."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from flowd.agents.base import (
    FlowdMeta,
    ToolCall,
    TurnRequest,
    TurnResult,
    estimate_tokens,
)
from flowd.agents.usage import wire_usage
from flowd.base import layout
from flowd.engine.core.budget import BudgetLimits, BudgetSpent, budget_spent
from flowd.engine.core.ports import PortSlots
from flowd.engine.core.review_comments import ReviewQueue
from flowd.engine.core.stops import BudgetHalt
from flowd.engine.gates import CommandRun, GatesElsewhere, run_gates
from flowd.engine.lane_objects import LaneObjects
from flowd.engine.spares import Spares
from flowd.engine.state import EpicPaths
from flowd.events.model import (
    AssistantMessage,
    BudgetExceeded,
    Event,
    GateWhere,
    Info,
    TokensUsed,
    ToolUse,
    Usage,
)
from flowd.plan.cone import cone_entries, sparse_cone
from flowd.plan.model import StoryPlan
from flowd.roster.leasing import Lease, LeaseInfo
from flowd.roster.pool import RosterPool
from flowd.store.config import Settings
from flowd.store.inbox import Answer, By, Reply
from flowd.trace.view import RunView
from flowd.vcs import sparse
from flowd.vcs.gitops import Repo


class PauseAnswers(Protocol):
    """What the context needs of the runner's live pauses (`engine/pause_desk.py`'s `PauseDesk`):
    taking an answer from outside the run. Declared here so the context stands below the desk."""

    async def answer(self, request: Answer) -> Reply: ...

    def waits_for_approval(self, story: str) -> bool:
        """Whether `story` waits for approval to merge (docs/answers.md: `merge`)."""
        ...

    def send_back(self, story: str, by: By, where: str) -> str:
        """A review comment on a story waiting for approval sends it back; what happens, in words."""
        ...


if TYPE_CHECKING:
    from flowd.engine.detect import Detector


class MergeQueue(Protocol):
    """What a story needs of the merge train (`engine/train.py`'s `TrainShell`, docs/merging.md):
    the one door into the epic. Declared here so the context stands below the train."""

    elsewhere: GatesElsewhere | None  # where candidates' gates run, if not here (docs/scale-out.md)

    async def merge(self, story: str, branch: str) -> str: ...

    async def aclose(self) -> None: ...


# Failures that are the executor's, not the reply's: a held coder moves to another executor.
MESSAGE_CHARS = 600
TOOL_ARG_CHARS = 300


class LaneCoder(Protocol):
    """A story's held coder clone as the context asks it for a turn no free slot can take
    (engine/held_coder.py)."""

    lease: Lease

    async def borrowed_turn(self, request: TurnRequest) -> TurnResult: ...


@dataclass
class RunContext:
    repo: Repo
    plan: StoryPlan
    plan_path: Path
    settings: Settings
    run_id: str
    epic_wt: Path
    worktree_root: Path
    paths: EpicPaths
    pool: RosterPool
    emit: Callable[[Event], object]
    view: RunView
    budget_usd: float | None = None
    story_budget_usd: float | None = None
    merge_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    halted: str | None = None
    # What waits for an answer instead of halting (docs/answers.md).
    pause_on: frozenset[str] = frozenset()
    pauses: PauseAnswers | None = None  # the runner's live pauses, once it schedules
    holders: dict[str, LaneCoder] = field(default_factory=dict)  # lane → its held coder
    reviews: ReviewQueue = field(default_factory=ReviewQueue)  # review comments due (engine/review.py)
    _budget_told: set[str] = field(default_factory=set)
    _train: MergeQueue | None = None
    # Told when a story enters the merge train (True: its lane is free) and when it is sent back
    # to work (False); the scheduler's shell sets it (docs/merging.md).
    lane_freed: Callable[[str, bool], None] | None = None
    # Told when a story's tasks are done, its judge and merge next: its dependent's lane may be made
    # ahead (engine/ahead.py); the scheduler's shell sets it.
    tasks_done: Callable[[str], None] | None = None
    # Detection after every turn, gate and setup command (docs/sandbox-detection.md); None: off.
    detect: Detector | None = None
    # Finished lanes' worktrees for the next lane to take (docs/repositories.md "Worktree
    # reuse"); None: every lane adds its own and removes it (a cluster node's lanes).
    spares: Spares | None = None
    # Stories whose branch and worktree were made ahead of their launch, while their last
    # dependencies were judged or in the merge train (engine/ahead.py); and those being made,
    # each event set once it is over (its `prepare` waits for it).
    made_ahead: set[str] = field(default_factory=set)
    placing_ahead: dict[str, asyncio.Event] = field(default_factory=dict)
    # Sparse story worktrees chosen by the run for a big checkout, not set by the user: a red gate
    # in one makes it whole and runs again, and later stories start whole (docs/repositories.md
    # "Big repositories").
    auto_sparse: bool = False
    whole_for_gates: bool = False
    # Running lanes' port ranges (docs/worktree-bootstrap.md), keyed by story id or `<story>#t<n>`.
    ports: PortSlots = field(init=False)

    # What each lane's git wrote, taken into the repository's store (docs/sandbox.md "The quarantine").
    lane_objects: LaneObjects = field(init=False)

    def __post_init__(self) -> None:
        self.ports = PortSlots(self.settings.worktree.port_base, self.settings.worktree.ports_per_lane)
        self.lane_objects = LaneObjects(self.repo.common_dir, self.emit, self.paths)

    def merge_train(self) -> MergeQueue:
        """The run's merge train (docs/merging.md): every story's one way into the epic. The
        runner sets it up; a context without one (a cluster node's) merges nothing."""
        if self._train is None:
            raise RuntimeError("this run context has no merge train (only the runner merges)")
        return self._train

    def set_train(self, train: MergeQueue) -> None:
        self._train = train

    async def close_train(self) -> None:
        """Nothing of the merge train (its candidate worktrees, its gate runs) outlives the run."""
        if self._train is not None:
            await self._train.aclose()

    def lane_env(self, key: str | None) -> dict[str, str]:
        """FLOWD_LANE/PORT/PORTS of a running lane (empty when it holds no range)."""
        held = self.ports.held(key) if key is not None else None
        return held.env() if held is not None else {}

    def step(
        self, lane: str | None, home: Path | None, *, own_home: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """One turn, gate or setup command of `lane` in `home`, checked when it ends (engine/detect.py),
        the objects its git wrote taken in before that (engine/lane_objects.py)."""
        checked: AbstractAsyncContextManager[None] = contextlib.nullcontext()
        if self.detect is not None and lane is not None:
            checked = self.detect.step(lane, home, own_home=own_home)
        return self.lane_objects.step(lane, home, checked)

    @property
    def epic_id(self) -> str:
        return self.plan.epic_id

    @property
    def epic_branch(self) -> str:
        return self.plan.epic_branch

    def story_branch(self, story_id: str) -> str:
        return layout.story_branch(self.epic_id, story_id)

    def story_worktree(self, story_id: str) -> Path:
        return layout.story_worktree(self.worktree_root, self.epic_id, story_id)

    def cone(self, story_id: str, start: str) -> list[str] | None:
        """The folders the story's worktrees check out when they start at `start`; None: the whole
        tree (docs/repositories.md "Sparse worktrees")."""
        settings = self.settings.worktree
        story = self.plan.story(story_id)
        if not settings.sparse or self.whole_for_gates or story is None:
            return None
        entries = [e for e in cone_entries(story, settings.sparse_dirs) if e not in ("", ".")]
        return sparse_cone(story, settings.sparse_dirs, sparse.kinds_at(self.repo, start, entries))

    def meta(
        self,
        role: str,
        story: str | None,
        task: str | None = None,
        index: int | None = None,
        env: dict[str, str] | None = None,
    ) -> FlowdMeta:
        lane = env if env is not None else self.lane_env(story)
        return FlowdMeta(
            role=role,
            run_id=self.run_id,
            epic_id=self.epic_id,
            story=story,
            task=task,
            task_index=index,
            env=lane or None,
        )

    def request(
        self,
        role: str,
        prompt: str,
        cwd: Path,
        story: str | None,
        task: str | None = None,
        index: int | None = None,
        env: dict[str, str] | None = None,
    ) -> TurnRequest:
        return TurnRequest(
            role=role,
            prompt=prompt,
            cwd=cwd,
            meta=self.meta(role, story, task, index, env),
            turn_timeout_s=self.settings.turn_timeout_s,
            stall_timeout_s=self.settings.stall_timeout_s,
        )

    # -- budget --------------------------------------------------------------------------------
    def budget_stop(self, lane: str | None) -> str | None:
        """Why no new task or story may start now (None: go on). Emits BudgetExceeded once per scope.

        The rule is `engine/core/budget.py`'s; this carries out its answer on the run's own fold.
        """
        spent = self._budget(lane)
        return None if spent is None else spent.reason

    def budget_halt(self, lane: str) -> BudgetHalt | None:
        """`budget_stop` for a story about to start a task, as the exception that stops it."""
        spent = self._budget(lane)
        return None if spent is None else BudgetHalt(spent.reason, whole_run=spent.scope == "epic")

    @property
    def epic_limit_usd(self) -> float | None:
        """The epic budget with what answers raised it by (docs/answers.md)."""
        return None if self.budget_usd is None else self.budget_usd + self.view.raised_usd

    def budget_raised(self, lane: str | None) -> None:
        """An answer raised a budget: the next time it is spent is told again."""
        self._budget_told.discard("epic" if lane is None else lane)

    def _budget(self, lane: str | None) -> BudgetSpent | None:
        lane_view = self.view.lanes.get(lane) if lane is not None else None
        story_spent = None if lane is None else ((lane_view.cost_usd or 0.0) if lane_view else 0.0)
        story_usd = self.story_budget_usd
        if story_usd is not None and lane is not None:
            story_usd += self.view.lane_raised_usd.get(lane, 0.0)
        limits = BudgetLimits(epic_usd=self.epic_limit_usd, story_usd=story_usd)
        spent = budget_spent(limits, self.view.totals.cost_usd or 0.0, story_spent)
        if spent is None:
            return None
        told = "epic" if spent.scope == "epic" else lane
        if told is not None and told not in self._budget_told:
            self._budget_told.add(told)
            self.emit(
                BudgetExceeded(
                    scope=spent.scope,
                    lane=None if spent.scope == "epic" else lane,
                    limit_usd=spent.limit_usd,
                    spent_usd=round(spent.spent_usd, 6),
                )
            )
        return spent

    async def gates(
        self, cwd: Path, *, where: GateWhere, lane: str, log_dir: Path, env: dict[str, str] | None = None
    ) -> CommandRun | None:
        """The run's gates in `cwd`, with its timeout, retries and trace (engine/gates.py), in the
        lane's environment (`env`, else the lane's ports: docs/worktree-bootstrap.md); the first
        red one. Red in a sparse worktree the run chose by itself: the worktree is made whole and
        the gates run again (`widen_for_gates`)."""
        for _ in range(2):
            async with self.step(lane, cwd, own_home=where != "epic"):
                red = await run_gates(
                    self.settings.gates,
                    cwd,
                    where=where,
                    lane=lane,
                    emit=self.emit,
                    log_dir=log_dir,
                    timeout_s=self.settings.gate_timeout_s,
                    env=env if env is not None else self.lane_env(lane),
                    retries=self.settings.gate_retries,
                )
            if red is None or not await asyncio.to_thread(self.widen_for_gates, cwd, lane):
                return red
        return red

    def widen_for_gates(self, wt: Path, lane: str) -> bool:
        """A gate was red in `wt`: when the run made it sparse by itself, check the whole tree out
        there (the gate may need a folder outside the story's perimeter), and have every story
        that starts later start whole; said once. False when `wt` was not such a worktree."""
        if not self.auto_sparse or not sparse.is_sparse(wt):
            return False
        sparse.apply_cone(wt, None)
        if not self.whole_for_gates:
            self.whole_for_gates = True
            self.emit(
                Info(
                    lane=lane,
                    message="a gate was red in a sparse story worktree: checked the whole tree out "
                    "there and ran the gates again; the run's next stories start whole (set "
                    "[worktree] sparse, and sparseDirs, to choose: docs/repositories.md)",
                )
            )
        return True

    # -- turns ---------------------------------------------------------------------------------
    def observer(self, lane: str | None, executor: str | None) -> Callable[[ToolCall | str], None]:
        def observe(item: ToolCall | str) -> None:
            if isinstance(item, ToolCall):
                args = item.args
                if isinstance(args, str | dict | list) and len(str(args)) > TOOL_ARG_CHARS:
                    args = str(args)[:TOOL_ARG_CHARS] + "…"
                self.emit(
                    ToolUse(lane=lane, executor=executor, tool=item.tool, args=args, parent=item.parent)
                )

        return observe

    def record_turn(
        self,
        request: TurnRequest,
        result: TurnResult,
        info: LeaseInfo,
        *,
        lane: str | None,
        coder_clone: bool,
    ) -> None:
        if result.text.strip():
            text = result.text.strip()
            if len(text) > MESSAGE_CHARS:
                text = text[:MESSAGE_CHARS] + "…"
            self.emit(AssistantMessage(lane=lane, agent=request.role, text=text))
        clone = info.clone if coder_clone else None

        def used(model: str | None, usage: Usage, estimated: bool = False) -> None:
            self.emit(
                TokensUsed(
                    lane=lane,
                    executor=info.executor,
                    clone=clone,
                    agent=request.role,
                    model=model,
                    usage=usage,
                    estimated=estimated,
                )
            )

        usage = result.usage
        model = (usage.model if usage else None) or result.model or info.model
        if usage is not None:
            used(model, wire_usage(usage))
        else:
            inp, out = estimate_tokens(request.prompt), estimate_tokens(result.text)
            used(model, Usage(input=inp, output=out, total=inp + out), estimated=True)
        for other in result.more_usage:  # the turn's requests on other models (side requests)
            used(other.model or model, wire_usage(other))

    async def ask(self, role: str, request: TurnRequest, *, lane: str | None) -> TurnResult:
        """One turn on any executor serving `role` (leased for the turn only).

        When no slot for the role is free and only stories' coders hold them, a turn whose lane's
        held coder can serve the role borrows that clone (at once, or as soon as that is so while
        it waits): otherwise stories holding every slot as coders would wait on each other, a
        planner for a whole story of another lane's coder.
        """
        holder = self.holders.get(lane) if lane is not None else None
        # A reviewer or judge other than the story's own coder is preferred (never waited for).
        independent = (
            frozenset({holder.lease.executor_id}) if holder is not None and role != "planner" else frozenset()
        )
        async with self.step(lane, request.cwd):
            if holder is not None and role in holder.lease.spec.roles:
                lease = await self.pool.lease_unless_coders_hold(role, label=lane, prefer_not=independent)
                if lease is None:
                    return await holder.borrowed_turn(request)
            else:
                lease = None
            result, info = await self.pool.run(
                role,
                request,
                label=lane,
                observe=self.observer(lane, None),
                prefer_not=independent,
                leased=lease,
            )
        self.record_turn(request, result, info, lane=lane, coder_clone=False)
        return result
