"""`flowd run`: validate everything, take the epic lock, then schedule stories until the epic is
done, failed, halted or cancelled; the report and `RunEnded` are written whatever happens.

Ready stories launch by critical-path rank (longest chain of dependents first, plan order
breaking ties), up to `concurrency` and never more than the roster's coder slots. Those rules are
the `Scheduler` machine's (engine/core/scheduler.py); `SchedulerShell` (engine/scheduler_shell.py)
carries out what it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from flowd.agents.factory import preload
from flowd.base import layout
from flowd.base.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_HALTED, EXIT_OK, FlowdError, InputError
from flowd.base.timeutil import iso
from flowd.cost.prices import pricer
from flowd.engine import epic_worktree
from flowd.engine.big_repo import with_choice, worktree_choice
from flowd.engine.bootstrap import bootstrap_epic, check_worktree_root, preflight
from flowd.engine.confinement import announcement, run_confinement
from flowd.engine.context import RunContext
from flowd.engine.core.bigrepo import Chosen
from flowd.engine.detect import Detector
from flowd.engine.lanes import Placement, open_placement
from flowd.engine.pause_desk import earlier_pauses
from flowd.engine.report import EpicReport, build_report, epic_history, write_report
from flowd.engine.runctl import new_run_id
from flowd.engine.scheduler_shell import SchedulerShell
from flowd.engine.spares import Spares, after_run, reap_in_background, to_trash
from flowd.engine.state import EpicLock, EpicPaths, load_state
from flowd.engine.story import StoryOutcome
from flowd.engine.story_merge import undo_interrupted_merge
from flowd.engine.train import TrainShell, recover_train
from flowd.events.model import (
    Envelope,
    Event,
    Info,
    RunEnded,
    RunOutcome,
    RunStarted,
    StageCompleted,
    StageStarted,
)
from flowd.plan.graph import ready
from flowd.plan.hashing import story_hash
from flowd.plan.model import StoryPlan
from flowd.plan.parse import load_plan
from flowd.roster.pool import RosterPool
from flowd.sandbox.confine import active, current
from flowd.store.config import Roster, Settings, load_roster, load_settings
from flowd.trace.log import (
    RunRecord,
    TraceWriter,
    fold_trace,
    list_runs,
    load_run_record,
    trace_path,
    write_run_record,
)
from flowd.trace.view import PauseView, RunView
from flowd.vcs import sparse
from flowd.vcs.gitops import Repo, worktree_root
from flowd.vcs.repo import flow_outside_sparse

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
    # What waits for an answer (docs/answers.md); None: the resumed run's, else `pauseOn` in config.
    pause_on: list[str] | None = None
    # The worktrees no lane took are removed after the run has ended: by a process of their own
    # (`flowd run`: the user does not wait for them), or here before `run_epic` returns.
    reap_in_background: bool = False


@dataclass
class RunResult:
    run_id: str
    outcome: str
    exit_code: int
    view: RunView
    report: EpicReport
    report_path: Path
    fresh: bool = True  # False: the epic was already done, nothing ran (run_id names the run that did it)
    reaper: int | None = None  # the pid removing the run's leftover worktrees in the background


@dataclass
class _Setup:
    """A run's validated input: everything `flowd run` checks before touching anything."""

    repo: Repo
    plan_path: Path
    plan: StoryPlan
    settings: Settings
    roster: Roster
    concurrency: int
    fail_fast: bool
    budget_usd: float | None
    paths: EpicPaths
    wt_root: Path
    epic_wt: Path
    run_id: str
    chosen: Chosen = field(
        default_factory=lambda: Chosen(0, False)
    )  # docs/repositories.md "Big repositories"


async def run_epic(options: RunOptions) -> RunResult:
    setup = _validate(options)
    preload(setup.roster.executors)  # the agents' client, while the run gets ready
    lock = EpicLock(setup.paths)
    lock.acquire(setup.run_id)
    try:
        recovered, finished = _recover(setup, options)
    except BaseException:
        lock.release()
        raise
    if finished is not None:
        lock.release()
        return finished
    return await _Session(setup, options, lock, recovered).run()


def _validate(options: RunOptions) -> _Setup:
    """Everything that can be wrong with the input is found before anything is touched."""
    repo = Repo.discover(options.cwd)
    hidden = flow_outside_sparse(repo.root)
    if hidden is not None:
        raise InputError(hidden)
    plan_path = options.plan if options.plan.is_absolute() else (options.cwd / options.plan)
    plan = load_plan(plan_path, shown=str(options.plan))
    settings = load_settings(repo.root)
    roster = load_roster(repo.root)
    if not any("coder" in e.roles for e in roster.executors):
        where = roster.described if roster.sources else f"{repo.root / '.flow' / 'roster.toml'} (missing)"
        raise InputError(f"no executor serves the coder role in {where}; add one (see docs/roster.md)")
    if options.base is not None and repo.rev_parse(options.base) is None:
        raise InputError(f"--base {options.base!r} is not a commit or branch of {repo.root}")
    busy = repo.unfinished() if options.base is None and not repo.branch_exists(plan.epic_branch) else None
    if busy is not None:
        # A new epic starts at your HEAD, which is a step of that operation (docs/repositories.md).
        raise InputError(
            f"your checkout {repo.root} is in the middle of {busy}; finish or abort it, or name "
            "the epic's starting point with --base"
        )
    concurrency = options.concurrency or settings.concurrency
    if concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    preflight(repo, settings, concurrency)
    wt_root = worktree_root(repo, settings.worktree_root)
    # A big checkout: spares kept and sparse story worktrees unless the user chose (docs/repositories.md
    # "Big repositories"); what the run then works with is in its settings.
    chosen = worktree_choice(repo, settings, concurrency)
    settings = with_choice(settings, chosen)
    check_worktree_root(repo, wt_root)
    return _Setup(
        repo=repo,
        plan_path=plan_path,
        plan=plan,
        settings=settings,
        roster=roster,
        concurrency=concurrency,
        fail_fast=settings.fail_fast if options.fail_fast is None else options.fail_fast,
        budget_usd=options.budget_usd if options.budget_usd is not None else settings.budget_usd,
        paths=EpicPaths(repo.root, plan.epic_id),
        wt_root=wt_root,
        epic_wt=layout.epic_worktree(wt_root, plan.epic_id),
        run_id=options.run_id or new_run_id(plan.epic_id),
        chosen=chosen,
    )


def _recover(setup: _Setup, options: RunOptions) -> tuple[list[Event], RunResult | None]:
    """Under the lock: undo a merge a killed run left unverified before anything reads the epic,
    check the epic worktree is clean, and find an epic that is already done."""
    repo, epic_wt = setup.repo, setup.epic_wt
    recovered: list[Event] = []
    undo_interrupted_merge(repo, setup.paths, epic_wt, recovered.append)
    recover_train(repo, setup.paths, epic_wt, setup.plan.epic_branch, setup.wt_root, recovered.append)
    if epic_worktree.checked_out(epic_wt):
        dirty = repo.status_paths(epic_wt)
        if dirty:
            raise InputError(
                f"the epic worktree {epic_wt} has uncommitted changes ({', '.join(dirty[:5])}); "
                "commit, move or discard them, then run again"
            )
    # Rerunning a finished epic adds no empty run (an explicit --run-id still gets its run).
    if options.run_id or recovered:
        return recovered, None
    return recovered, _already_done(repo, setup.plan, setup.paths, setup.settings)


class _Session:
    """One run from its first trace event to its report: the trace, the roster, the scheduler."""

    def __init__(self, setup: _Setup, options: RunOptions, lock: EpicLock, recovered: list[Event]) -> None:
        self.setup, self.options, self.lock, self.recovered = setup, options, lock, recovered
        repo, run_id = setup.repo, setup.run_id
        previous = load_run_record(repo.root, run_id)
        self.record = RunRecord(
            run_id=run_id,
            epic_id=setup.plan.epic_id,
            plan=str(setup.plan_path),
            pid=os.getpid(),
            started_at=previous.started_at if previous else iso(),
            repo=str(repo.root),
        )
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()  # a signal, or a trace that can no longer be written
        self.broken: list[str] = []
        self.writer = TraceWriter(trace_path(repo.root, run_id), run_id, on_error=self._trace_failed)
        # A continued run counts what it already did.
        self.view = fold_trace(self.writer.path, RunView(run_id=run_id, pricer=pricer(setup.settings)))
        # Folded under the writer's lock and checkpointed next to the trace (docs/trace.md).
        self.writer.fold_into(self.view)
        if options.on_event is not None:
            self.writer.subscribe(options.on_event)
        self.outcomes: dict[str, StoryOutcome] = {}
        self.pool: RosterPool | None = None
        # A resumed run keeps what it was launched with unless told otherwise, and the pauses it
        # (or, for a new run, the epic's previous run) left unanswered (docs/answers.md).
        self.carried: dict[str, PauseView] = {}
        earlier_pause_on = None
        if self.view.last_seq == 0:
            self.carried, earlier_pause_on = earlier_pauses(
                repo.root, setup.plan.epic_id, run_id, self.view.pricer
            )
        self.pause_on: list[str] = next(
            p
            for p in (
                options.pause_on,
                self.view.pause_on,
                earlier_pause_on,
                [str(r) for r in setup.settings.pause_on],
            )
            if p is not None
        )
        self.placement: Placement | None = None
        self.spares: Spares | None = None
        self.reaper: int | None = None
        self.ctx: RunContext | None = None
        self.detector: Detector | None = None
        self.train: TrainShell | None = None

    def _trace_failed(self, exc: OSError) -> None:
        self.broken.append(
            f"could not write the trace {trace_path(self.setup.repo.root, self.setup.run_id)} "
            f"({exc.strerror or exc}); free some space, then run again: the run resumes where it stopped"
        )
        self.loop.call_soon_threadsafe(self.stop.set)

    async def run(self) -> RunResult:
        outcome: RunOutcome = "failed"
        reason: str | None = None
        setup = self.setup
        confinement = run_confinement(
            setup.repo, setup.settings, setup.wt_root, setup.plan.epic_id, setup.paths, self.writer.emit
        )
        try:
            with active(confinement):
                self._start()
                said = announcement(confinement, setup.settings.sandbox.mode)
                if said is not None:
                    self.writer.emit(said)
                outcome, reason = await self._schedule()
        except FlowdError as exc:
            outcome, reason = ("halted" if exc.exit_code == EXIT_HALTED else "failed"), str(exc)
            self.writer.emit(Info(message=f"run stopped: {exc}"))
        except BaseException as exc:
            outcome, reason = "cancelled", f"interrupted ({type(exc).__name__})"
            raise
        finally:
            try:
                report = await self._end(outcome, reason)  # the run's agent processes end here
            finally:
                confinement.close()
        setup = self.setup
        return RunResult(
            setup.run_id,
            outcome,
            EXIT_FOR.get(outcome, EXIT_FAILED),
            self.view,
            report,
            setup.paths.report_md,
            reaper=self.reaper,
        )

    def _start(self) -> None:
        setup, repo, plan, writer = self.setup, self.setup.repo, self.setup.plan, self.writer
        repo.ensure_flow_excluded()
        write_run_record(repo.root, self.record)
        writer.emit(
            RunStarted(
                epic_id=plan.epic_id,
                epic_branch=plan.epic_branch,
                plan=str(setup.plan_path),
                stories=plan.ids,
                concurrency=setup.concurrency,
                titles={s.id: s.title for s in plan.stories},
                budget_usd=setup.budget_usd,
                pause_on=self.pause_on,
                depends_on={s.id: list(s.depends_on) for s in plan.stories},
            )
        )
        if setup.chosen.said is not None:  # said once, in the run's first lines
            writer.emit(Info(message=setup.chosen.said))
        for event in self.recovered:
            writer.emit(event)
        writer.emit(StageStarted(stage="epic branch"))
        if not repo.branch_exists(plan.epic_branch):
            repo.create_branch(plan.epic_branch, self.options.base or "HEAD")
            writer.emit(Info(message=f"created {plan.epic_branch} at {repo.head(plan.epic_branch)[:10]}"))
        # A run that finds none checks the epic worktree out when it ends (engine/epic_worktree.py).
        fresh = not epic_worktree.checked_out(setup.epic_wt)
        if not fresh:
            repo.worktree_add(setup.epic_wt, plan.epic_branch)  # a previous run's: repaired if needed
        elif not (setup.epic_wt / ".git").exists():
            repo.worktree_register(setup.epic_wt, plan.epic_branch)
        if setup.settings.worktree.sparse and sparse.enable_worktree_config(repo):
            said = "extensions.worktreeConfig, for sparse worktrees: docs/repositories.md"
            writer.emit(Info(message=f"turned on git's per-worktree config in {repo.root} ({said})"))
        # Spares a killed run left, then those earlier runs kept, are the pool's first
        # (docs/repositories.md "Worktree reuse").
        keep = setup.settings.worktree.keep_spares
        self.spares = Spares(repo, setup.wt_root / plan.epic_id, writer.emit, keep=keep)
        self.spares.recover()
        if not fresh:
            self._bootstrap_epic()
        writer.emit(StageCompleted(stage="epic branch"))
        sandbox = setup.settings.sandbox
        confined = current()
        if sandbox.mode != "off":  # detection is on whatever enforces (docs/sandbox-detection.md)
            self.detector = Detector(
                root=repo.root,
                common_dir=repo.common_dir,
                epic_id=plan.epic_id,
                epic_wt=setup.epic_wt,
                worktree_root=setup.wt_root,
                emit=writer.emit,
                allow_write=tuple(sandbox.allow_write),
                trace_guard=writer.outside_writes,
                checkout_sealed=confined is not None and confined.seals(repo.root),
            )
            self.detector.start()

    def _lane_worktrees(self) -> list[Path]:
        ctx = self.ctx
        if ctx is None:
            return []
        root = os.path.realpath(ctx.worktree_root / ctx.epic_id) + os.sep
        return [w.path for w in ctx.repo.worktrees() if os.path.realpath(w.path).startswith(root)]

    def _finish_epic_worktree(self) -> None:
        """A run that found no epic worktree checks it out now, from the train's last candidate
        worktree when it left one (engine/epic_worktree.py); a failure is said, not raised."""
        epic_wt = self.setup.epic_wt
        if not epic_worktree.placeholder(epic_wt):
            return
        slot = self.train.handover if self.train is not None else None
        try:
            epic_worktree.finish(self.setup.repo, epic_wt, self.setup.plan.epic_branch, slot)
            self._bootstrap_epic()
        except (FlowdError, OSError) as exc:
            self.writer.emit(Info(message=f"could not check out the epic worktree {epic_wt}: {exc}"))
        if slot is not None and slot.exists():  # not moved (git moves no worktree with submodules)
            to_trash(epic_wt.parent, slot.parent)  # `_train/w<n>`, emptied after the run
            with contextlib.suppress(OSError):
                slot.parent.parent.rmdir()

    def _bootstrap_epic(self) -> None:
        note = bootstrap_epic(self.setup.repo, self.setup.settings, self.setup.epic_wt)
        if note is not None:
            self.writer.emit(Info(message=note))

    async def _schedule(self) -> tuple[RunOutcome, str | None]:
        setup, writer, confinement = self.setup, self.writer, current()
        # A confined agent process serves one lane for life (docs/sandbox.md).
        enforcing = confinement is not None and confinement.enforcing

        def emit(event: Event) -> None:
            writer.emit(event)

        self.pool = RosterPool(
            setup.roster,
            state_path=setup.repo.root / ".flow" / "roster-state.json",
            emit=emit,
            log_dir=setup.paths.agent_logs(),
            lane_bound=enforcing,
        )
        ctx = RunContext(
            repo=setup.repo,
            plan=setup.plan,
            plan_path=setup.plan_path,
            settings=setup.settings,
            run_id=setup.run_id,
            epic_wt=setup.epic_wt,
            worktree_root=setup.wt_root,
            paths=setup.paths,
            pool=self.pool,
            emit=writer.emit,
            view=self.view,
            budget_usd=setup.budget_usd,
            story_budget_usd=setup.settings.story_budget_usd,
            pause_on=frozenset(self.pause_on),
            detect=self.detector,
            spares=self.spares,
            auto_sparse=setup.chosen.auto_sparse,
        )
        self.ctx = ctx
        train = self.train = TrainShell(ctx)
        ctx.set_train(train)
        first = min(setup.concurrency, len(ready(setup.plan)))
        train.warm(first_lanes=first)
        if self.detector is not None:
            self.detector.merge_lock = ctx.merge_lock
        # The first stories' agents start while their worktrees are prepared (docs/performance.md),
        # here or on the lanes' nodes (docs/scale-out.md).
        # None starts ahead where a process serves one lane (its first turn would replace it).
        if setup.settings.lanes.engine == "local" and not enforcing:
            self.pool.prestart({"coder": first, "planner": first}, setup.repo.root)
        self.placement = await open_placement(ctx, first)
        shell = SchedulerShell(
            ctx,
            setup.concurrency,
            setup.fail_fast,
            self.outcomes,
            stop=self.stop,
            broken=self.broken,
            placement=self.placement,
        )
        shell.carried = self.carried
        return await shell.run(self.options.handle_signals)

    async def _end(self, outcome: RunOutcome, reason: str | None) -> EpicReport:
        """Whatever happened: agents closed, `RunEnded`, the report, `run.json`, the lock released."""
        setup, repo, view, writer = self.setup, self.setup.repo, self.view, self.writer
        if self.placement is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.placement.aclose())
        if self.ctx is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.ctx.close_train())
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.pool.aclose())
        await asyncio.shield(asyncio.to_thread(self._finish_epic_worktree))
        if self.ctx is not None:
            # What a stray wrote last into a lane's quarantine: taken in, or refused and said.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.ctx.lane_objects.sweep, self._lane_worktrees())
        if self.detector is not None:
            # Nothing of the run is running any more: every place once more (a stray's last write).
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.detector.sweep, self.detector.lane_worktrees())
        if self.spares is not None:
            # Renames, under the lock: no later run takes a spare this one still hands out.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.spares.retire)
        done = view.count("done")
        failed = view.count("failed")
        skipped = len(setup.plan.stories) - done - failed
        writer.emit(RunEnded(outcome=outcome, done=done, failed=failed, skipped=skipped, reason=reason))
        notes = {story: (o.branch, o.note, o.executors) for story, o in self.outcomes.items()}
        try:
            earlier = epic_history(repo.root, setup.plan.epic_id, setup.run_id, view.pricer)
        except OSError:
            earlier = []
        report = build_report(setup.plan, view, notes, earlier)
        with contextlib.suppress(OSError):
            write_report(setup.paths, report, view)
        try:
            write_run_record(
                repo.root, self.record.model_copy(update={"ended_at": iso(), "outcome": outcome})
            )
        except OSError as exc:
            self.broken.append(
                f"could not record the end of the run in {trace_path(repo.root, setup.run_id).parent}: {exc}"
            )
        writer.close()
        self.lock.release()
        await self._reap()
        if self.broken:
            # The trace may not say it: stderr is the one channel left (stdout is --json's).
            print(f"flowd: run {setup.run_id} halted: {self.broken[0]}", file=sys.stderr)
        return report

    async def _reap(self) -> None:
        """The trash emptied once the run has ended (engine/spares.py): the outcome, trace and
        report are written and the lock is free; a crash here leaves it to the next run."""
        lanes = self.setup.wt_root / self.setup.plan.epic_id
        keep = self.spares.keep if self.spares is not None else 0  # and the kept spares made up
        if self.options.reap_in_background:
            proc = reap_in_background(lanes, self.setup.repo.root, keep)
            self.reaper = proc.pid if proc is not None else None
        else:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(after_run, lanes, self.setup.repo.root, keep)


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
