"""`flowd run`: validate everything, take the epic lock, then schedule stories until the epic is
done, failed, halted or cancelled; the report and `RunEnded` are written whatever happens.

Ready stories launch by critical-path rank (longest chain of dependents first, plan order
breaking ties), up to `concurrency` and never more than the roster's coder slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from flowd.config import Settings, load_roster, load_settings
from flowd.cost.prices import pricer
from flowd.engine.context import RunContext
from flowd.engine.report import EpicReport, build_report, epic_history, write_report
from flowd.engine.state import EpicLock, EpicPaths, load_state
from flowd.engine.story import StoryOutcome, StoryRun, undo_interrupted_merge
from flowd.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_HALTED, EXIT_OK, FlowdError, InputError
from flowd.events import (
    Envelope,
    Event,
    Info,
    RunEnded,
    RunOutcome,
    RunStarted,
    StageCompleted,
    StageStarted,
    StoryStatusChanged,
)
from flowd.gitops import Repo, worktree_root
from flowd.plan.graph import critical_path_rank, dependents_of, estimate_durations, launch_order, ready
from flowd.plan.hashing import story_hash
from flowd.plan.model import StoryPlan
from flowd.plan.parse import load_plan
from flowd.roster import RosterPool
from flowd.runctl import new_run_id
from flowd.timeutil import iso
from flowd.trace import (
    RunRecord,
    TraceWriter,
    fold_trace,
    list_runs,
    load_run_record,
    story_durations,
    trace_path,
    write_run_record,
)
from flowd.view import RunView

EXIT_FOR = {"done": EXIT_OK, "failed": EXIT_FAILED, "halted": EXIT_HALTED, "cancelled": EXIT_CANCELLED}


@dataclass
class RunOptions:
    plan: Path
    cwd: Path = field(default_factory=Path.cwd)
    run_id: str | None = None
    concurrency: int | None = None
    fail_fast: bool | None = None
    budget_usd: float | None = None
    base: str | None = None
    on_event: Callable[[Envelope], None] | None = None
    handle_signals: bool = True


@dataclass
class RunResult:
    run_id: str
    outcome: str
    exit_code: int
    view: RunView
    report: EpicReport
    report_path: Path
    fresh: bool = True  # False: the epic was already done, nothing ran (run_id names the run that did it)


async def run_epic(options: RunOptions) -> RunResult:
    # Everything that can be wrong with the input is found before anything is touched.
    repo = Repo.discover(options.cwd)
    plan_path = options.plan if options.plan.is_absolute() else (options.cwd / options.plan)
    plan = load_plan(plan_path, shown=str(options.plan))
    settings = load_settings(repo.root)
    roster = load_roster(repo.root)
    if not any("coder" in e.roles for e in roster.executors):
        where = roster.described if roster.sources else f"{repo.root / '.flow' / 'roster.toml'} (missing)"
        raise InputError(f"no executor serves the coder role in {where}; add one (see docs/roster.md)")
    if options.base is not None and repo.rev_parse(options.base) is None:
        raise InputError(f"--base {options.base!r} is not a commit or branch of {repo.root}")
    concurrency = options.concurrency or settings.concurrency
    if concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    fail_fast = settings.fail_fast if options.fail_fast is None else options.fail_fast
    budget = options.budget_usd if options.budget_usd is not None else settings.budget_usd
    paths = EpicPaths(repo.root, plan.epic_id)
    wt_root = worktree_root(repo, settings.worktree_root)
    epic_wt = wt_root / plan.epic_id / "_epic"
    run_id = options.run_id or new_run_id(plan.epic_id)
    lock = EpicLock(paths)
    lock.acquire(run_id)
    recovered: list[Event] = []
    try:
        # Under the lock: a merge a killed run left unverified is undone before anything reads the epic.
        undo_interrupted_merge(repo, paths, epic_wt, recovered.append)
        if (epic_wt / ".git").exists():
            dirty = repo.status_paths(epic_wt)
            if dirty:
                raise InputError(
                    f"the epic worktree {epic_wt} has uncommitted changes ({', '.join(dirty[:5])}); "
                    "commit, move or discard them, then run again"
                )
        # Rerunning a finished epic adds no empty run (an explicit --run-id still gets its run).
        finished = None if (options.run_id or recovered) else _already_done(repo, plan, paths, settings)
    except BaseException:
        lock.release()
        raise
    if finished is not None:
        lock.release()
        return finished
    previous = load_run_record(repo.root, run_id)
    record = RunRecord(
        run_id=run_id,
        epic_id=plan.epic_id,
        plan=str(plan_path),
        pid=os.getpid(),
        started_at=previous.started_at if previous else iso(),
        repo=str(repo.root),
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()  # a signal, or a trace that can no longer be written
    broken: list[str] = []

    def trace_failed(exc: OSError) -> None:
        broken.append(
            f"could not write the trace {trace_path(repo.root, run_id)} ({exc.strerror or exc}); "
            "free some space, then run again: the run resumes where it stopped"
        )
        loop.call_soon_threadsafe(stop.set)

    writer = TraceWriter(trace_path(repo.root, run_id), run_id, on_error=trace_failed)
    # A continued run counts what it already did.
    view = fold_trace(writer.path, RunView(run_id=run_id, pricer=pricer(settings)))
    writer.subscribe(view.apply)
    if options.on_event is not None:
        writer.subscribe(options.on_event)
    outcomes: dict[str, StoryOutcome] = {}
    pool: RosterPool | None = None
    outcome: RunOutcome = "failed"
    reason: str | None = None
    try:
        repo.ensure_flow_excluded()
        write_run_record(repo.root, record)
        writer.emit(
            RunStarted(
                epic_id=plan.epic_id,
                epic_branch=plan.epic_branch,
                plan=str(plan_path),
                stories=plan.ids,
                concurrency=concurrency,
                titles={s.id: s.title for s in plan.stories},
                budget_usd=budget,
            )
        )
        for event in recovered:
            writer.emit(event)
        writer.emit(StageStarted(stage="epic branch"))
        if not repo.branch_exists(plan.epic_branch):
            repo.create_branch(plan.epic_branch, options.base or "HEAD")
            writer.emit(Info(message=f"created {plan.epic_branch} at {repo.head(plan.epic_branch)[:10]}"))
        repo.worktree_add(epic_wt, plan.epic_branch)
        writer.emit(StageCompleted(stage="epic branch"))

        def emit(event: Event) -> None:
            writer.emit(event)

        pool = RosterPool(
            roster,
            state_path=repo.root / ".flow" / "roster-state.json",
            emit=emit,
            log_dir=paths.agent_logs(),
        )
        ctx = RunContext(
            repo=repo,
            plan=plan,
            plan_path=plan_path,
            settings=settings,
            run_id=run_id,
            epic_wt=epic_wt,
            worktree_root=wt_root,
            paths=paths,
            pool=pool,
            emit=writer.emit,
            view=view,
            budget_usd=budget,
            story_budget_usd=settings.story_budget_usd,
        )
        scheduler = Scheduler(ctx, concurrency, fail_fast, outcomes, stop=stop, broken=broken)
        outcome, reason = await scheduler.run(options.handle_signals)
    except FlowdError as exc:
        outcome, reason = ("halted" if exc.exit_code == EXIT_HALTED else "failed"), str(exc)
        writer.emit(Info(message=f"run stopped: {exc}"))
    except BaseException as exc:
        outcome, reason = "cancelled", f"interrupted ({type(exc).__name__})"
        raise
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(pool.aclose())
        done = view.count("done")
        failed = view.count("failed")
        writer.emit(
            RunEnded(
                outcome=outcome,
                done=done,
                failed=failed,
                skipped=len(plan.stories) - done - failed,
                reason=reason,
            )
        )
        notes = {sid: (o.branch, o.note, o.executors) for sid, o in outcomes.items()}
        try:
            earlier = epic_history(repo.root, plan.epic_id, run_id, view.pricer)
        except OSError:
            earlier = []
        report = build_report(plan, view, notes, earlier)
        with contextlib.suppress(OSError):
            write_report(paths, report)
        try:
            write_run_record(repo.root, record.model_copy(update={"ended_at": iso(), "outcome": outcome}))
        except OSError as exc:
            broken.append(
                f"could not record the end of the run in {trace_path(repo.root, run_id).parent}: {exc}"
            )
        writer.close()
        lock.release()
        if broken:
            # The trace may not say it: stderr is the one channel left (stdout is --json's).
            print(f"flowd: run {run_id} halted: {broken[0]}", file=sys.stderr)
    return RunResult(run_id, outcome, EXIT_FOR.get(outcome, EXIT_FAILED), view, report, paths.report_md)


def _already_done(repo: Repo, plan: StoryPlan, paths: EpicPaths, settings: Settings) -> RunResult | None:
    """The result of the run that finished this epic, when every story of the plan as it is now is
    merged and cleaned up; None when there is anything left to do."""
    if not repo.branch_exists(plan.epic_branch):
        return None
    for story in plan.stories:
        state = load_state(paths, story.id)
        if state is None or state.status != "merged" or state.hash != story_hash(story):
            return None
        if Path(state.worktree).exists():
            return None  # a clean-up a killed run left: the next run finishes it
    last = next((r for r in list_runs(repo.root) if r.epic_id == plan.epic_id and r.outcome == "done"), None)
    if last is None:
        return None
    view = fold_trace(
        trace_path(repo.root, last.run_id), RunView(run_id=last.run_id, pricer=pricer(settings))
    )
    try:
        report = EpicReport.model_validate_json(paths.report_json.read_bytes())
    except (OSError, ValueError):
        report = build_report(plan, view, {})
    return RunResult(last.run_id, "done", EXIT_OK, view, report, paths.report_md, fresh=False)


class Scheduler:
    def __init__(
        self,
        ctx: RunContext,
        concurrency: int,
        fail_fast: bool,
        outcomes: dict[str, StoryOutcome],
        *,
        stop: asyncio.Event | None = None,
        broken: list[str] | None = None,
    ) -> None:
        self.ctx = ctx
        self.concurrency = concurrency
        self.fail_fast = fail_fast
        self.outcomes = outcomes
        self.running: dict[str, asyncio.Task[StoryOutcome]] = {}
        self.waiting: dict[str, str] = {}
        self.halted: str | None = None
        self.failed_fast: str | None = None
        # Longest expected chain of dependents first, by durations estimated from each story's size
        # and earlier runs (docs/performance.md: scheduling).
        history = story_durations(ctx.repo.root)
        self.rank = critical_path_rank(ctx.plan, estimate_durations(ctx.plan, history))
        self.cancel = stop or asyncio.Event()
        self.broken = broken if broken is not None else []
        self.last_summary = ""

    def _status_sets(self) -> tuple[set[str], set[str]]:
        done = {s for s, o in self.outcomes.items() if o.status == "done"}
        failed = {s for s, o in self.outcomes.items() if o.status != "done"}
        return done, failed

    async def run(self, handle_signals: bool) -> tuple[RunOutcome, str | None]:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.cancel.set)
                    installed.append(sig)
        try:
            return await self._loop()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _launch(self) -> None:
        ctx = self.ctx
        done, failed = self._status_sets()
        ready_ids = ready(ctx.plan, done, failed, self.waiting, self.running)
        if not ready_ids:
            return
        capacity = min(self.concurrency, max(1, ctx.pool.total_slots("coder")))
        budget = capacity - len(self.running)
        for sid in launch_order(ctx.plan, ready_ids, self.rank)[: max(0, budget)]:
            stop = ctx.budget_stop(None)
            if stop is not None:
                self.halted = stop
                return
            self.running[sid] = asyncio.create_task(
                StoryRun(ctx, ctx.plan.require(sid)).run(), name=f"story {sid}"
            )
        left = len(ready_ids) - max(0, budget)
        if left > 0:
            self._summary(
                f"{len(self.running)} running (concurrency {self.concurrency}); {left} ready, waiting for a slot"
            )

    def _summary(self, text: str) -> None:
        if text != self.last_summary:
            self.last_summary = text
            self.ctx.emit(Info(message=f"epic {self.ctx.epic_id}: {text}"))

    async def _loop(self) -> tuple[RunOutcome, str | None]:
        ctx = self.ctx
        cancel_wait = asyncio.create_task(self.cancel.wait(), name="cancel")
        try:
            while True:
                if self.halted is None and self.failed_fast is None and not self.cancel.is_set():
                    self._launch()
                if not self.running:
                    break
                finished, _ = await asyncio.wait(
                    [*self.running.values(), cancel_wait], return_when=asyncio.FIRST_COMPLETED
                )
                if self.cancel.is_set():
                    await self._stop_all()
                    if self.broken:
                        return "halted", self.broken[0]
                    return "cancelled", "cancelled by a signal"
                for task in finished:
                    sid = next(s for s, t in self.running.items() if t is task)
                    del self.running[sid]
                    self._record(sid, cast(StoryOutcome, task.result()))
                if self.failed_fast is not None and self.running:
                    await self._stop_all()
        finally:
            cancel_wait.cancel()
        if self.failed_fast is not None:
            self._hold_rest(f"not started: fail-fast after {self.failed_fast}")
            return "failed", f"story {self.failed_fast} failed (fail-fast)"
        if self.halted is not None:
            ctx.emit(Info(message=f"epic {ctx.epic_id}: stopped launching stories — {self.halted}"))
            self._hold_rest(f"not started: {self.halted}")
            return "halted", self.halted
        if all(o.status == "done" for o in self.outcomes.values()) and len(self.outcomes) == len(
            ctx.plan.stories
        ):
            return "done", None
        return "failed", None

    def _record(self, sid: str, outcome: StoryOutcome) -> None:
        self.outcomes[sid] = outcome
        if outcome.halt is not None and self.halted is None:
            self.halted = outcome.halt
        if outcome.status == "done":
            return
        if outcome.status == "failed" and self.fail_fast and self.failed_fast is None:
            self.failed_fast = sid
        for dependent in dependents_of(self.ctx.plan, sid):
            if (
                dependent not in self.outcomes
                and dependent not in self.running
                and dependent not in self.waiting
            ):
                self.waiting[dependent] = f"waiting for {sid}"
                self.ctx.emit(
                    StoryStatusChanged(story=dependent, status="waiting", reason=f"waiting for {sid}")
                )

    def _hold_rest(self, reason: str) -> None:
        for story in self.ctx.plan.stories:
            if (
                story.id not in self.outcomes
                and story.id not in self.waiting
                and story.id not in self.running
            ):
                self.waiting[story.id] = reason
                self.ctx.emit(StoryStatusChanged(story=story.id, status="waiting", reason=reason))

    async def _stop_all(self) -> None:
        tasks = list(self.running.items())
        for _, task in tasks:
            task.cancel()
        for sid, task in tasks:
            try:
                self.outcomes[sid] = await task
            except asyncio.CancelledError:
                self.outcomes[sid] = StoryOutcome(sid, "cancelled", reason="cancelled")
                self.ctx.emit(StoryStatusChanged(story=sid, status="waiting", reason="cancelled; resumable"))
            except Exception as exc:
                self.outcomes[sid] = StoryOutcome(sid, "failed", reason=str(exc))
        self.running.clear()
