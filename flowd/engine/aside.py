"""Parallel tasks inside a story (docs/architecture.md): the task-graph scheduler and the aside runner.

The story's held coder runs one task at a time in the story worktree ("home"). Ready tasks the
graph allows run beside it ("aside"), each on a coder clone leased only if one is free now, in a
task worktree on a task branch made from the story branch's committed state, limited to its
`Owns:` paths. A finished aside task merges back into the story branch under a per-story lock
that a home task holds from its first coder turn to its commit, so a merge never lands in the
middle of a home task's uncommitted work.

A task run aside never fails its story: when no clone is free, it strays, stops on BLOCKED_ON
or fails, it is declined and rerun at home; when its merge conflicts, it reruns at home last.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Protocol

from flowd.agents.base import AgentError, TurnRequest, TurnResult
from flowd.base import layout
from flowd.base.errors import FlowdError
from flowd.engine import prompts
from flowd.engine.bootstrap import describe_prepared, include_path, prepare_lane
from flowd.engine.context import RunContext
from flowd.engine.core.stops import BudgetHalt, Halt, StoryFailed, StoryWaiting
from flowd.engine.core.taskgraph import AsideOutcome, TaskGraphState
from flowd.engine.gates import run_command
from flowd.engine.taskbody import Seat, TaskBody
from flowd.events.model import Info
from flowd.plan.model import Story
from flowd.roster.leasing import Lease
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import TaskNode, task_nodes

Outcome = AsideOutcome


class StoryTasks(Protocol):
    """What the task graph needs of the story's task loop (`engine/taskloop.py`'s `TaskLoop`, which
    runs the graph): the story, its worktree and branch, its plan, and the steps of one task."""

    @property
    def ctx(self) -> RunContext: ...
    @property
    def story(self) -> Story: ...
    @property
    def story_id(self) -> str: ...
    @property
    def worktree(self) -> Path: ...
    @property
    def branch(self) -> str: ...
    @property
    def plan(self) -> TaskPlan: ...
    @property
    def body(self) -> TaskBody: ...

    def started(self, index: int, task: Task, lease: Lease, *, parallel: bool | None) -> None: ...
    async def run_home(self, index: int, task: Task, *, parallel: bool | None = None) -> None: ...
    def complete(self, index: int, task: Task) -> None: ...
    def append_revision(self, subject: str, lead: str, findings: str) -> Task: ...


class AsideCoder:
    """A coder clone leased for one task: no hand-over (a failing executor declines the task)."""

    def __init__(self, ctx: RunContext, lane: str, lease: Lease) -> None:
        self.ctx = ctx
        self.lane = lane
        self._lease = lease

    @property
    def lease(self) -> Lease:
        return self._lease

    async def turn(self, request: TurnRequest) -> TurnResult:
        lease = self._lease
        try:
            result = await lease.executor.run_turn(request, self.ctx.observer(self.lane, lease.executor_id))
        except AgentError as error:
            self.ctx.pool.fail(lease, error)  # a parallel task's coder is never moved (after_fault)
            raise
        self.ctx.pool.succeeded(lease)
        self.ctx.record_turn(request, result, lease.info, lane=self.lane, coder_clone=True)
        return result


def task_worktree(ctx: RunContext, story_id: str, index: int) -> Path:
    return layout.task_worktree(ctx.worktree_root, ctx.epic_id, story_id, index)


def task_branch(ctx: RunContext, story_id: str, index: int) -> str:
    return layout.task_branch(ctx.epic_id, story_id, index)


class TaskGraph:
    """Runs a story's incomplete tasks by their `Depends on:` graph, up to `taskConcurrency` at once."""

    def __init__(self, loop: StoryTasks) -> None:
        self.loop = loop
        self.ctx = loop.ctx
        self.story_id = loop.story_id
        # Home tasks and merge-backs exclude each other (asyncio.Lock is fair: a waiting merge goes
        # before the next home task).
        self.lock = asyncio.Lock()
        self.merged = 0

    def info(self, message: str) -> None:
        self.ctx.emit(Info(lane=self.story_id, message=message))

    async def run(self) -> None:
        """Schedule until every task is done; then, if parallel tasks merged, the story's gates must
        be green on the combination (one revision task may repair them)."""
        ctx, loop = self.ctx, self.loop
        revised = False
        check = False
        while True:
            before = self.merged
            await self._schedule()
            check = check or self.merged > before
            if not check or not ctx.settings.gates:
                return
            stage = f"story {self.story_id}: gates after parallel tasks"
            red = await ctx.gates(
                loop.worktree,
                where="task",
                lane=self.story_id,
                log_dir=ctx.paths.gate_logs(self.story_id) / "after-parallel",
            )
            if red is None:
                return
            if revised:
                raise StoryFailed(
                    f"its gates are red with its parallel tasks merged together:\n{red.describe()}"
                )
            self.info(f"{stage}: red; adding a revision task")
            revised = True
            loop.append_revision(
                "make the story gates green after merging its parallel tasks",
                prompts.STORY_GATES_LEAD.format(red=red.describe()),
                "- the gates above",
            )

    async def _schedule(self) -> None:
        ctx, loop = self.ctx, self.loop
        graph = TaskGraphState.of(task_nodes(loop.plan))
        running: dict[asyncio.Task[Outcome | None], int] = {}
        home: asyncio.Task[Outcome | None] | None = None
        stop: BudgetHalt | None = None
        try:
            while not graph.finished:
                stop = stop or ctx.budget_halt(self.story_id)
                if stop is None:
                    pick, aside = graph.picks(running.values(), home_free=home is None)
                    if pick is not None:
                        home = asyncio.create_task(self._home(graph.nodes[pick - 1]))
                        running[home] = pick
                    for index in aside:
                        if len(running) >= ctx.settings.task_concurrency:
                            break
                        lease = ctx.pool.try_lease("coder", label=f"{self.story_id}#t{index}")
                        if lease is None:
                            graph.declined(index)  # declined before any disk work
                            continue
                        running[asyncio.create_task(self._aside(graph.nodes[index - 1], lease))] = index
                if not running:
                    if stop is not None:
                        raise stop
                    left = len(graph.nodes) - len(graph.done)
                    raise StoryFailed(f"story {self.story_id}: no task can start, though {left} are not done")
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for job in finished:
                    index = running.pop(job)
                    outcome = job.result()  # a home task's failure ends the story here
                    if job is home:
                        home = None
                        graph.home_done(index)
                        loop.complete(index, graph.nodes[index - 1].task)
                    elif graph.aside_done(index, outcome):
                        loop.complete(index, graph.nodes[index - 1].task)
        finally:
            for job in running:
                job.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _home(self, node: TaskNode) -> Outcome | None:
        async with self.lock:
            await self.loop.run_home(node.index, node.task, parallel=False)
        return None

    async def _aside(self, node: TaskNode, lease: Lease) -> Outcome | None:
        ctx, loop, repo, story_id = self.ctx, self.loop, self.ctx.repo, self.story_id
        index, task = node.index, node.task
        worktree, branch = task_worktree(ctx, story_id, index), task_branch(ctx, story_id, index)
        key = f"{story_id}#t{index}"  # a lane of its own for ports: its gates run beside the story's
        try:
            try:
                fork = await asyncio.to_thread(repo.head, loop.branch)
                await asyncio.to_thread(self._make, worktree, branch, fork)
                ports, copied = await asyncio.to_thread(prepare_lane, ctx, key, story_id, worktree)
                self.info(f"task {index}: {describe_prepared(ports, copied)}")
                loop.started(index, task, lease, parallel=True)
                await self._setup(worktree, index, ports.env())
                rules = prompts.story_rules(ctx.plan, loop.story, worktree) + prompts.lane_ports_note(
                    ports.env()
                )
                if node.owns:
                    rules += prompts.TASK_OWNS_NOTE.format(owns=", ".join(node.owns))
                seat = Seat(
                    worktree=worktree,
                    coder=AsideCoder(ctx, story_id, lease),
                    rules=rules,
                    aside=True,
                    owns=list(node.owns),
                    fork=fork,
                    gate_logs=ctx.paths.gate_logs(story_id) / f"task-{index}",
                    env=ports.env(),
                )
                commit = await loop.body.run(seat, index, task)
            finally:
                ctx.pool.release(lease)  # the clone is free before the merge waits
                ctx.ports.release(key)
            async with self.lock:
                if commit is not None:
                    message = f"{story_id}: merge task {index} ({task.title})"
                    result = await asyncio.to_thread(repo.merge, loop.worktree, branch, message)
                    if not result.ok:
                        self.info(
                            f"task {index} conflicted merging back ({', '.join(result.conflicts)}); "
                            "the story's coder runs it last"
                        )
                        return "conflict"
                    self.merged += 1
                self.info(f"task {index} ({task.title}) merged from beside the story's coder")
            return "merged"
        except asyncio.CancelledError:
            raise
        except StoryWaiting as waiting:
            self.info(
                f"task {index} stopped on BLOCKED_ON aside ({waiting.reason}); the story's coder takes it"
            )
            return "declined"
        except (StoryFailed, FlowdError, AgentError, Halt, OSError) as exc:
            first = (getattr(exc, "reason", None) or str(exc) or type(exc).__name__).splitlines()[0]
            self.info(f"task {index}: could not finish aside ({first}); the story's coder takes it")
            return "declined"
        finally:
            with contextlib.suppress(FlowdError, OSError):
                if ctx.spares is not None:
                    await ctx.pool.leave_lane(worktree)  # its folder is the next lane's
                await asyncio.to_thread(self._discard, worktree, branch)

    async def _setup(self, worktree: Path, index: int, env: dict[str, str]) -> None:
        ctx = self.ctx
        for number, command in enumerate(ctx.settings.setup, start=1):
            log = ctx.paths.gate_logs(self.story_id).parent / "setup" / f"task-{index}-{number}.log"
            async with ctx.step(self.story_id, worktree):
                result = await run_command(
                    command, worktree, log=log, timeout_s=ctx.settings.gate_timeout_s, env=env
                )
            if not result.ok:
                raise StoryFailed(f"setup failed in the task worktree: {result.describe()}")

    def _make(self, worktree: Path, branch: str, fork: str) -> None:
        """The task worktree on a task branch at `fork`: a spare reset there when the run keeps
        spares (docs/repositories.md "Worktree reuse"), else added anew; what a killed run left
        at its path is thrown away either way."""
        spares = self.ctx.spares
        if spares is not None:
            include = include_path(self.ctx.repo, self.ctx.settings)
            spares.take(worktree, branch, fork, include, cone=self.ctx.cone(self.story_id, fork))
            return
        self._discard(worktree, branch)
        self.ctx.repo.worktree_add(worktree, branch, fork)

    def _discard(self, worktree: Path, branch: str) -> None:
        """Remove a task worktree and its branch (leftovers of a killed run included); with
        spares it becomes one, its uncommitted work thrown away as a removal would."""
        spares = self.ctx.spares
        if (
            spares is not None
            and (worktree / ".git").is_file()
            and spares.give(worktree, branch, force=True) is None
        ):
            return
        self.ctx.repo.discard_worktree(worktree, branch)
