"""The shell of the `Scheduler` machine (engine/core/scheduler.py): it launches story tasks,
writes trace events, asks people, stops every lane, and feeds back what happened as the machine's
events; the rules are the machine's. `runner.py` opens one per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import signal
import sys
from typing import cast

from flowd.engine.context import RunContext
from flowd.engine.core.budget import BudgetLimits, budget_spent
from flowd.engine.core.scheduler import (
    AskPerson,
    Cancelled,
    Instruction,
    LaneFreed,
    Launch,
    MakeAhead,
    MarkWaiting,
    Paused,
    Poll,
    ReportBudget,
    Say,
    Scheduler,
    StopAll,
    StoryFinished,
    StoryStopped,
    TasksDone,
)
from flowd.engine.core.scheduler import Event as SchedulerEvent
from flowd.engine.core.stopped import when_stopped
from flowd.engine.lanes import LocalPlacement, Placement
from flowd.engine.pause_desk import PauseDesk
from flowd.engine.requests import RequestDesk
from flowd.engine.review import carry_over
from flowd.engine.story import StoryOutcome
from flowd.events.model import Info, RunOutcome, StoryStatusChanged
from flowd.plan.graph import critical_path_rank, estimate_durations
from flowd.store.inbox import InboxReader
from flowd.trace.log import story_durations
from flowd.trace.view import PauseView


class SchedulerShell:
    """Carries out the `Scheduler` machine's instructions (story tasks, trace events, cancelling)
    and feeds back what happened as its events; the rules live in `engine/core/scheduler.py`."""

    def __init__(
        self,
        ctx: RunContext,
        concurrency: int,
        fail_fast: bool,
        outcomes: dict[str, StoryOutcome],
        *,
        stop: asyncio.Event | None = None,
        broken: list[str] | None = None,
        placement: Placement | None = None,
    ) -> None:
        self.ctx = ctx
        self.placement = placement or LocalPlacement(ctx)
        self.outcomes = outcomes
        self.tasks: dict[str, asyncio.Task[StoryOutcome]] = {}
        # Longest expected chain of dependents first, by durations estimated from each story's size
        # and earlier runs (docs/performance.md: scheduling).
        history = story_durations(ctx.repo.root)
        rank = critical_path_rank(ctx.plan, estimate_durations(ctx.plan, history))
        self.machine = Scheduler(ctx.plan, rank, concurrency, fail_fast, pause_on=ctx.pause_on)
        self.pauses = ctx.pauses = PauseDesk(ctx)
        self.carried: dict[str, PauseView] = {}  # the epic's previous run's unanswered pauses
        self.cancel = stop or asyncio.Event()
        self.broken = broken if broken is not None else []
        # Stories entering and leaving the merge train (docs/merging.md): a lane freed may launch one.
        self.lanes_changed: list[LaneFreed | TasksDone] = []
        self.lanes_wake = asyncio.Event()
        ctx.lane_freed = self._lane_freed
        ctx.tasks_done = self._tasks_done

    def _lane_freed(self, story: str, freed: bool) -> None:
        self.lanes_changed.append(LaneFreed(story, freed))
        self.lanes_wake.set()

    def _tasks_done(self, story: str) -> None:
        self.lanes_changed.append(TasksDone(story))
        self.lanes_wake.set()

    async def run(self, handle_signals: bool) -> tuple[RunOutcome, str | None]:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals:
            handlers = {
                signal.SIGTERM: self.cancel.set,
                signal.SIGINT: self.cancel.set,
                signal.SIGUSR1: dump_tasks,
            }
            for sig, handler in handlers.items():
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, handler)
                    installed.append(sig)
        try:
            return await self._loop()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _poll(self) -> Poll:
        ctx = self.ctx
        spent = budget_spent(BudgetLimits(epic_usd=ctx.epic_limit_usd), ctx.view.totals.cost_usd or 0.0)
        return Poll(
            coder_slots=ctx.pool.total_slots("coder"),
            budget_spent=spent.reason if spent else None,
            may_launch=not self.cancel.is_set(),
        )

    async def _loop(self) -> tuple[RunOutcome, str | None]:
        machine = self.machine
        cancel_wait = asyncio.create_task(self.cancel.wait(), name="cancel")
        # Answers and revisions from the CLI and the editor (docs/answers.md).
        carry_over(self.ctx)  # review comments a killed runner recorded but never made tasks
        inbox = InboxReader(self.ctx.repo.root, self.ctx.run_id)
        desk = asyncio.create_task(inbox.serve(RequestDesk(self.ctx).handle), name="inbox")
        # An answer wakes the loop as a finished story does (docs/answers.md).
        answered = asyncio.create_task(self.pauses.wake.wait(), name="answers")
        freed = asyncio.create_task(self.lanes_wake.wait(), name="lanes freed")
        try:
            # Pauses a killed run left unanswered stay paused (docs/answers.md).
            await self._carry_out(machine.handle(*self.pauses.restore(self.carried), self._poll()))
            while machine.ended is None:
                finished, _ = await asyncio.wait(
                    [*self.tasks.values(), cancel_wait, answered, freed], return_when=asyncio.FIRST_COMPLETED
                )
                if self.cancel.is_set():
                    await self._carry_out(machine.handle(Cancelled(self.broken[0] if self.broken else None)))
                    break
                events: list[SchedulerEvent] = [
                    self._finished(cast(asyncio.Task[StoryOutcome], task))
                    for task in finished
                    if task is not answered and task is not freed
                ]
                if freed in finished:
                    self.lanes_wake.clear()
                    events[:0], self.lanes_changed = self.lanes_changed, []
                    freed = asyncio.create_task(self.lanes_wake.wait(), name="lanes freed")
                if answered in finished:
                    events += self.pauses.take()
                    answered = asyncio.create_task(self.pauses.wake.wait(), name="answers")
                await self._carry_out(machine.handle(*events))
                await self._carry_out(machine.handle(self._poll()))
        finally:
            answered.cancel()
            freed.cancel()
            cancel_wait.cancel()
            desk.cancel()
            await asyncio.wait({desk})  # its cancel is not raised here; a cancel of this task is
        assert machine.ended is not None
        return machine.ended.outcome, machine.ended.reason

    def _finished(self, task: asyncio.Task[StoryOutcome]) -> StoryFinished | Paused:
        story = next(s for s, t in self.tasks.items() if t is task)
        del self.tasks[story]
        outcome = task.result()
        self.outcomes[story] = outcome
        if outcome.status == "paused" and outcome.pause is not None:
            whose = None if outcome.pause_run else story
            return Paused(outcome.pause, story=whose, stopped=story, detail=outcome.reason or "")
        return StoryFinished(story, outcome.status, outcome.halt)

    async def _carry_out(self, instructions: list[Instruction]) -> None:
        ctx = self.ctx
        for step in instructions:
            if isinstance(step, Launch):
                run = self.placement.run(step.story)
                self.tasks[step.story] = asyncio.create_task(run, name=f"story {step.story}")
            elif isinstance(step, MakeAhead):
                self.placement.make_ahead(step.story)
            elif isinstance(step, MarkWaiting):
                ctx.emit(StoryStatusChanged(story=step.story, status="waiting", reason=step.reason))
            elif isinstance(step, Say):
                ctx.emit(Info(message=step.message))
            elif isinstance(step, ReportBudget):
                ctx.budget_stop(None)  # emits BudgetExceeded once per run
            elif isinstance(step, AskPerson):
                self.pauses.ask(step.story, step.reason, step.detail)
            elif isinstance(step, StopAll):
                await self._carry_out(self.machine.handle(*await self._stop_all()))

    async def _stop_all(self) -> list[StoryStopped]:
        tasks = list(self.tasks.items())
        for _, task in tasks:
            task.cancel()
        stopped: list[StoryStopped] = []
        for story, task in tasks:
            # What each outcome is, is engine/core/stopped.py's rule; this only learns how it ended.
            self.outcomes[story] = when_stopped(story, await _ended(task))
            stopped.append(StoryStopped(story, self.outcomes[story].status))
        self.tasks.clear()
        return stopped


async def _ended(task: asyncio.Task[StoryOutcome]) -> StoryOutcome | Exception | None:
    """How a cancelled story task ended: its outcome, None when the cancel stopped it, or its error."""
    try:
        return await task
    except asyncio.CancelledError:
        return None
    except Exception as exc:
        return exc


def dump_tasks() -> None:
    """`kill -USR1 <pid>` of a run that seems stuck: every task's chain of awaits and every
    thread's stack on stderr (docs/reliability.md); the run goes on."""
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}", file=sys.stderr)
        awaited: object = task.get_coro()
        while awaited is not None:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                print(
                    f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}", file=sys.stderr
                )
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
