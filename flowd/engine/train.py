"""The merge train's shell (docs/merging.md): carries out `MergeTrain`'s instructions with git.

Every story merges through `TrainShell.merge` (local lanes and Ray lanes alike): it enters the
queue (`Ready`, the one "ready to merge" door) and waits until it lands (its merge commit), is
sent back (`RedMerge`, with its own gate output) or is ejected (`Ejected`: it conflicted with the
stories ahead of it). Candidates are built in temporary detached worktrees under
`<worktreeRoot>/<epic>/_train/`, one per candidate, each story its own `--no-ff` merge commit; the
epic gates run there. The epic branch only moves by a fast-forward of the epic worktree to a
green candidate's tip, under the merge lock, with `train-landing.json` written first so a run
killed half-way through the checkout finds and finishes it (`recover_train`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base import layout
from flowd.base.errors import FlowdError
from flowd.base.fsio import write_model_atomic
from flowd.base.layout import TRAIN_DIR
from flowd.base.wire import WireModel
from flowd.engine import epic_worktree
from flowd.engine.bootstrap import bootstrap_files
from flowd.engine.context import RunContext
from flowd.engine.core import train as rules
from flowd.engine.core.stops import Halt, StoryFailed
from flowd.engine.gates import CommandRun, GatesElsewhere, NotPlaced, run_gates
from flowd.engine.spares import to_trash
from flowd.engine.state import EpicPaths, load_state, save_state
from flowd.events.model import (
    Event,
    GateFlaky,
    Info,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRolledBack,
    StageCompleted,
    StageFailed,
    StageStarted,
    StoryMerged,
)
from flowd.vcs.admin import AdminProblem, check_candidate
from flowd.vcs.gitcli import GitDirChanged, admin_of
from flowd.vcs.gitops import Repo


class RedMerge(StoryFailed):
    """The epic gates were red on the story alone; it never reached the epic (docs/revisions.md)."""

    def __init__(self, gate: str, output: str) -> None:
        super().__init__(f"epic gates failed after merging; merge undone:\n{output}")
        self.gate = gate
        self.output = output


class Ejected(Exception):
    """The story's merge conflicted with the stories ahead of it in the train."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Landing(WireModel):
    """`train-landing.json`: the epic worktree is being moved from `base` to the green `tip`."""

    base: str
    tip: str


def landing_path(paths: EpicPaths) -> Path:
    return paths.root / "train-landing.json"


def train_root(ctx_root: Path, epic_id: str) -> Path:
    return ctx_root / epic_id / TRAIN_DIR


def recover_train(
    repo: Repo,
    paths: EpicPaths,
    epic_wt: Path,
    branch: str,
    wt_root: Path,
    emit: Callable[[Event], object],
) -> None:
    """Under the epic lock, before anything reads the epic: finish a landing a killed run left
    half-done and remove candidate worktrees. A landing begins only after its candidate's gates
    passed, so it is finished, never undone; nothing else of a candidate ever reached the epic."""
    path = landing_path(paths)
    landing = _load_landing(path)
    if landing is not None and epic_worktree.placeholder(epic_wt):
        if repo.rev_parse(branch) == landing.base:
            repo.move_branch(branch, landing.tip, landing.base)  # its gates had passed
            emit(
                Info(
                    message=f"finished the epic's landing at {landing.tip[:10]} the previous run was killed in"
                )
            )
    elif landing is not None and (epic_wt / ".git").exists():
        with contextlib.suppress(FlowdError):
            repo.clear_stale_locks(epic_wt)
        head = repo.head_of(epic_wt)
        if head in (landing.base, landing.tip):
            # Its gates had passed: the landing is finished, never undone.
            repo.reset_hard(epic_wt, landing.tip)
            emit(
                Info(
                    message=f"finished the epic's landing at {landing.tip[:10]} the previous run was killed in"
                )
            )
        else:
            emit(Info(message=f"{epic_wt} moved on since the previous run's last landing; its head is kept"))
    path.unlink(missing_ok=True)
    root = train_root(wt_root, paths.epic_id)
    if root.is_dir():
        # Into the trash (one rename each), emptied after the run (engine/spares.py): nothing
        # of a candidate is used again, and the run does not wait for its files to go.
        for candidate in sorted(root.iterdir()):
            to_trash(root.parent, candidate)
        with contextlib.suppress(FlowdError):
            repo.worktree_prune()
        with contextlib.suppress(OSError):
            root.rmdir()


def _load_landing(path: Path) -> Landing | None:
    try:
        return Landing.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # torn before its rename: the landing never began


@dataclass
class _Built:
    worktree: Path
    tip: str
    commits: dict[str, str] = field(default_factory=dict)  # story → its merge commit


@dataclass
class _Waiter:
    branch: str
    done: asyncio.Future[str]


class TrainShell:
    """One run's merge train: the `MergeTrain` machine and the git and gates it asks for."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        plan, settings = ctx.plan, ctx.settings
        first = max((b.batch for b in ctx.view.batches), default=0) + 1
        self.machine = rules.MergeTrain(
            deps={s.id: frozenset(s.depends_on) for s in plan.stories},
            max_batch=settings.merge_batch,
            concurrency=settings.merge_concurrency,
            gate_retries=settings.gate_retries,
            first_batch=first,
        )
        self.waiters: dict[str, _Waiter] = {}
        self.built: dict[int, _Built] = {}
        self.gating: dict[int, asyncio.Task[None]] = {}
        self.gate_ms: list[int] = []
        self.saved_ms = 0  # what one-at-a-time would have spent beyond the train (the report's)
        self._events: list[rules.Event] = []
        self._lock = asyncio.Lock()
        self._feeds: set[asyncio.Task[None]] = set()
        self.root = train_root(ctx.worktree_root, ctx.epic_id)
        # Candidate worktrees are slots, reused: checking out the next base writes only what differs.
        self._free: list[Path] = []
        self._slots = 0
        self._made_at: dict[Path, str] = {}  # the slot `warm` made, and the commit it holds
        self._warming: asyncio.Task[Path] | None = None
        # The slot the run's end makes the epic worktree of, when the run found none (aclose).
        self.handover: Path | None = None
        # Set by a placement that runs candidates' gates on its own machines (docs/scale-out.md).
        self.elsewhere: GatesElsewhere | None = None
        # Whether a candidate's gates were found writing its admin files (`_check_slot`).
        self._planted = False

    def warm(self, first_lanes: int = 0) -> None:
        """Make the first candidate worktree now, while the lanes work: in a big repository a
        checkout takes seconds, which the first merge would otherwise wait for (docs/merging.md).
        A killed run's slot at that path is taken over, as `_merge_all` does. On a run that found
        no epic worktree it is the run's one whole checkout: the epic worktree is made from it when
        the run ends (engine/epic_worktree.py). It is a spare when more are free than the
        `first_lanes` the run starts with need."""
        if self._warming is not None or self._free or self._slots:
            return
        self._slots = 1
        spares = self.ctx.spares
        spare = spares.reserve(leave=first_lanes) if spares is not None else None
        self._warming = asyncio.create_task(asyncio.to_thread(self._make_slot, self._slot_path(1), spare))

    def _make_slot(self, worktree: Path, spare: Path | None) -> Path:
        try:
            self._remove(worktree)
            worktree.parent.mkdir(parents=True, exist_ok=True)
            start = self.ctx.repo.head(self.ctx.epic_branch)
            # A spare (docs/repositories.md "Worktree reuse") writes only what differs.
            spares = self.ctx.spares
            if spare is None or spares is None or not spares.take_detached(spare, worktree, start):
                self.ctx.repo.worktree_add_detached(worktree, start, reclaim=True, beside=True)
            bootstrap_files(self.ctx.repo, self.ctx.settings, worktree)
            self._made_at[worktree] = start
        except BaseException:
            self._remove(worktree)  # `_merge_all` makes it again when it is first needed
            raise
        return worktree

    async def _warmed(self) -> None:
        """The first candidate worktree, once made, joins the free slots (a failure is left to the
        first build, which makes it again and says why)."""
        task, self._warming = self._warming, None
        if task is not None:
            with contextlib.suppress(Exception):
                self._free.append(await task)

    # -- the door ------------------------------------------------------------------------------
    async def merge(self, story: str, branch: str) -> str:
        """Merge `story`'s `branch` into the epic behind the epic gates: its merge commit. Raises
        `RedMerge` (sent back), `Ejected` (conflicted with the stories ahead) or `Halt`."""
        ctx = self.ctx
        async with ctx.merge_lock:  # never while a landing moves the epic worktree
            dirty = await asyncio.to_thread(self._epic_changes)
        if dirty:
            raise Halt(
                f"the epic worktree {ctx.epic_wt} has uncommitted changes (found after story '{story}' "
                f"finished): {', '.join(dirty[:5])}; move or discard them, then run again"
            )
        waiter = _Waiter(branch, asyncio.get_running_loop().create_future())
        self.waiters[story] = waiter
        ctx.emit(StageStarted(stage=f"story {story}: merge", lane=story))
        try:
            await self.feed(rules.Ready(story))
            self._lane(story, True)
            try:
                return await asyncio.shield(waiter.done)
            except (RedMerge, Ejected):
                self._lane(story, False)  # back to work: it holds a lane again
                raise
        except asyncio.CancelledError:
            if self.waiters.get(story) is waiter:
                del self.waiters[story]
                await asyncio.shield(self.feed(rules.Withdrawn(story)))
            raise

    def _epic_changes(self) -> list[str]:
        """The user's uncommitted changes in the epic worktree (a placeholder holds none)."""
        wt = self.ctx.epic_wt
        return self.ctx.repo.status_paths(wt) if epic_worktree.checked_out(wt) else []

    def _lane(self, story: str, freed: bool) -> None:
        if self.ctx.lane_freed is not None:
            self.ctx.lane_freed(story, freed)

    async def cancel(self) -> None:
        await self.feed(rules.Cancel())

    async def aclose(self) -> None:
        await self._warmed()
        for task in list(self.gating.values()):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self.gating.values(), *self._feeds, return_exceptions=True)
        if self._free and epic_worktree.placeholder(self.ctx.epic_wt):
            self.handover = self._free.pop()  # the last freed: it holds what landed last, or near
        slots = [*self._free, *(b.worktree for b in self.built.values())]
        self.built.clear()
        self._free.clear()
        for worktree in slots:
            if self.ctx.spares is not None:
                # Emptied after the run has ended (engine/spares.py): not on its critical path.
                to_trash(
                    self.root.parent, worktree.parent if worktree.parent.parent == self.root else worktree
                )
            else:
                await asyncio.to_thread(self._remove, worktree)
        with contextlib.suppress(OSError):
            self.root.rmdir()

    # -- feeding the machine -------------------------------------------------------------------
    async def feed(self, *events: rules.Event) -> None:
        """Events in, instructions carried out, one feed at a time (what an instruction leads to,
        a conflict building a candidate, is fed next, in the same turn)."""
        async with self._lock:
            self._events += [*events, self._capacity()]
            while self._events:
                batch, self._events = self._events, []
                for step in self.machine.handle(*batch):
                    await self._carry_out(step)

    def _capacity(self) -> rules.Capacity:
        view = self.ctx.view
        free = max(0, view.concurrency - view.count("active"))
        return rules.Capacity(free, tuple(self.gate_ms[-8:]))

    async def _carry_out(self, step: rules.Instruction) -> None:
        ctx = self.ctx
        if isinstance(step, rules.Build):
            await self._build(step)
        elif isinstance(step, rules.Regate):
            self._gate(step.cid, step.start)
        elif isinstance(step, rules.Flaky):
            lanes = self._lanes_of(step.cid)
            gate = ctx.settings.gates[step.gate] if step.gate < len(ctx.settings.gates) else "gates"
            lane = lanes[0] if len(lanes) == 1 else None
            ctx.emit(GateFlaky(lane=lane, where="epic", gate=gate, attempts=step.attempts))
        elif isinstance(step, rules.Result):
            ctx.emit(MergeBatchResult(batch=step.batch, ok=step.ok, duration_ms=step.duration_ms))
        elif isinstance(step, rules.Land):
            await self._land(step)
        elif isinstance(step, rules.Discard):
            await self._discard(step.cid)
        elif isinstance(step, rules.SendBack):
            self._send_back(step)
        else:
            waiter = self.waiters.pop(step.story, None)
            if waiter is not None and not waiter.done.done():
                waiter.done.set_exception(Ejected(step.detail))

    def _lanes_of(self, cid: int) -> list[str]:
        return next((c.lanes for c in self.machine.chain if c.cid == cid), [])

    # -- candidates ----------------------------------------------------------------------------
    async def _build(self, step: rules.Build) -> None:
        ctx, repo = self.ctx, self.ctx.repo
        base = self.built[step.base].tip if step.base is not None and step.base in self.built else None
        if base is None:
            base = await asyncio.to_thread(repo.head, ctx.epic_branch)
        if step.bisect:
            ctx.emit(MergeBisect(batch=step.batch, lanes=list(step.lanes)))
        else:
            ctx.emit(MergeBatchStarted(batch=step.batch, lanes=list(step.lanes), base=base))
        await self._warmed()
        worktree = self._slot()
        try:
            built = await asyncio.to_thread(self._merge_all, worktree, base, step)
        except _Conflict as conflict:
            self._events.append(rules.Conflicted(step.cid, conflict.story, conflict.detail))
            return
        except (FlowdError, OSError) as exc:
            self._unbuildable(step, exc)
            return
        self.built[step.cid] = built
        self._gate(step.cid, 0)

    def _unbuildable(self, step: rules.Build, exc: FlowdError | OSError) -> None:
        """The candidate could not be made (git or the disk refused): each of its stories fails
        with the sentence, and leaves the train, so the candidate is discarded and the stories
        behind it go on (it would otherwise hold its gate slot for ever)."""
        reason = str(exc) if isinstance(exc, FlowdError) else f"could not prepare a merge candidate: {exc}"
        for story in step.lanes:
            waiter = self.waiters.pop(story, None)
            if waiter is not None and not waiter.done.done():
                waiter.done.set_exception(StoryFailed(reason))
            self._events.append(rules.Withdrawn(story))

    def _slot(self) -> Path:
        """A free candidate worktree, or a new one. Named `_epic` like the epic worktree: a
        candidate is the epic as it will be, and gates that look at where they run see the same."""
        if self._free:
            return self._free.pop()
        self._slots += 1
        return self._slot_path(self._slots)

    def _slot_path(self, number: int) -> Path:
        return self.root / f"w{number}" / layout.EPIC_LANE

    def _merge_all(self, worktree: Path, base: str, step: rules.Build) -> _Built:
        """The candidate: `base` checked out at `worktree`, each story merged on it in order."""
        repo, ctx = self.ctx.repo, self.ctx
        if self._made_at.pop(worktree, None) == base:
            # Made at `base` while the lanes worked, never used since: a `checkout -f` of the
            # same commit would only read every file's status again (0.3 s in a big checkout).
            pass
        elif (worktree / ".git").exists() and self._reusable(worktree, base):
            repo.check_out_detached(worktree, base)  # a slot used before: only what differs is written
            bootstrap_files(repo, ctx.settings, worktree)  # the ignored files the gates need
        else:
            self._remove(worktree)
            worktree.parent.mkdir(parents=True, exist_ok=True)
            repo.worktree_add_detached(worktree, base, reclaim=True)  # a killed run's slot: ours
            bootstrap_files(repo, ctx.settings, worktree)
        built = _Built(worktree, base)
        for story in step.lanes:
            waiter = self.waiters.get(story)
            branch = waiter.branch if waiter is not None else ctx.story_branch(story)
            result = repo.merge(worktree, branch, f"{ctx.epic_id}: merge story {story}")
            if not result.ok:
                self._free.append(worktree)  # `merge` aborted the conflict: the slot is reusable
                raise _Conflict(story, ", ".join(result.conflicts))
            built.commits[story] = result.commit or built.tip
            built.tip = result.commit or built.tip
        return built

    def _reusable(self, worktree: Path, base: str) -> bool:
        """A slot used before, its admin files as flowd left them first: a gate that ran there may
        have planted a filter in `config.worktree` or a link in `logs/` (docs/merging.md
        "Candidates"). False when they cannot be put back (its admin dir's `gitdir` made to name
        another worktree, and no admin dir names this one): flowd's git refuses to run there, so
        the slot is made anew rather than failing the stories of the next candidate built in it."""
        self._check_slot(worktree, None, base)
        try:
            return admin_of(self.ctx.repo.common_dir, worktree) is not None
        except GitDirChanged:
            return False

    def _check_slot(
        self, worktree: Path, lane: str | None, at: str, elsewhere: Sequence[AdminProblem] = ()
    ) -> None:
        """The candidate's git admin files put back as flowd left them and its object quarantine
        thrown away (engine/detect.py), blamed on `lane`, the story whose code its gates ran (None:
        no one story can be named). `elsewhere`: what the node that ran the gates found in its slot."""
        if self.ctx.detect is not None:
            found = self.ctx.detect.check_candidate(worktree, lane, at, elsewhere)
        else:
            made = [*check_candidate(self.ctx.repo.common_dir, worktree, at), *elsewhere]
            found = sum(1 for problem in made if problem.what is not None)
        self._planted = self._planted or found > 0

    def _gate(self, cid: int, start: int) -> None:
        task = asyncio.ensure_future(self._run_gates(cid, start))
        self.gating[cid] = task
        task.add_done_callback(functools.partial(self._gate_done, cid))

    async def _run_gates(self, cid: int, start: int) -> None:
        ctx = self.ctx
        built = self.built[cid]
        commands = ctx.settings.gates[start:]
        lanes = self._lanes_of(cid)
        started = time.monotonic()
        red = await self._gates_of(cid, built, commands, lanes)
        duration = int((time.monotonic() - started) * 1000)
        self.gate_ms.append(duration)
        if red is None:
            gated = rules.Gated(cid, True, duration)
        else:
            index = start + commands.index(red.command)
            named = await asyncio.to_thread(self._suspects, built, lanes, red.tail) if len(lanes) > 1 else ()
            gated = rules.Gated(
                cid, False, duration, index, red.command, red.describe(), red.exit_code < 0, suspects=named
            )
        # Fed from its own task: a Discard that cancels this one never cancels a feed under way.
        feed = asyncio.ensure_future(self.feed(gated))
        self._feeds.add(feed)
        feed.add_done_callback(self._feed_done)

    def _suspects(self, built: _Built, lanes: list[str], output: str) -> tuple[str, ...]:
        """The candidate's stories whose merged files the red output names: the bisection gates
        them last and alone (engine/core/train.py). Only a hint: git failing here names none."""
        merged: dict[str, list[str]] = {}
        for story in lanes:
            commit = built.commits.get(story)
            try:
                merged[story] = self.ctx.repo.merged_paths(built.worktree, commit) if commit else []
            except FlowdError:
                merged[story] = []
        return rules.named_stories(output, merged, str(built.worktree))

    async def _gates_of(
        self, cid: int, built: _Built, commands: list[str], lanes: list[str]
    ) -> CommandRun | None:
        """The candidate's first red gate (None: green): on the cluster when the placement runs
        them there, else here (and here too when the cluster could not)."""
        ctx = self.ctx
        lane = lanes[0] if len(lanes) == 1 else None
        found: list[AdminProblem] = []  # what a node found in its own slot after the gates ran there
        try:
            if self.elsewhere is not None:
                try:
                    return await self.elsewhere.gate(cid, built.tip, commands, lane, found)
                except NotPlaced as why:
                    ctx.emit(
                        Info(lane=lane, message=f"merge candidate {cid}: its epic gates run here ({why})")
                    )
            return await self._gates_here(cid, built, commands, lanes)
        finally:
            # Checked before anything of flowd's reads the candidate again (its suspects' diff, the
            # next build in the slot): what the gates wrote to its admin files is put back, its
            # objects thrown away. Blamed only when nothing else can have done it: gates that ran
            # alone, on a base that held no code found planting before (landed code runs in every
            # later candidate). The same for what a node's gates did in the node's slot.
            alone = lane if not self._planted and len(self.gating) <= 1 else None
            await asyncio.shield(asyncio.to_thread(self._check_slot, built.worktree, alone, built.tip, found))

    async def _gates_here(
        self, cid: int, built: _Built, commands: list[str], lanes: list[str]
    ) -> CommandRun | None:
        ctx = self.ctx
        lane = lanes[0] if len(lanes) == 1 else None
        return await run_gates(
            commands,
            built.worktree,
            where="epic",
            lane=lane,
            emit=ctx.emit,
            log_dir=ctx.paths.root / "train" / f"c{cid}",
            timeout_s=ctx.settings.gate_timeout_s,
            # A candidate's gates use its first story's ports: that lane waits for its merge, so
            # nothing else of its runs there (docs/worktree-bootstrap.md).
            env=ctx.lane_env(lanes[0]) if lanes else {},
            retries=0,  # the machine decides reruns (engine/core/train.py)
        )

    def _gate_done(self, cid: int, task: asyncio.Task[None]) -> None:
        if self.gating.get(cid) is task:
            del self.gating[cid]
        if not task.cancelled() and task.exception() is not None:
            # A gate that could not even start: the candidate is red, with why.
            exc = task.exception()
            feed = asyncio.ensure_future(self.feed(rules.Gated(cid, False, 0, 0, "gates", f"{exc}")))
            self._feeds.add(feed)
            feed.add_done_callback(self._feed_done)

    def _feed_done(self, task: asyncio.Task[None]) -> None:
        self._feeds.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.ctx.emit(Info(message=f"the merge train stopped: {exc}"))
            for waiter in self.waiters.values():
                if not waiter.done.done():
                    waiter.done.set_exception(Halt(f"the merge train stopped: {exc}"))
            self.waiters.clear()

    async def _discard(self, cid: int) -> None:
        task = self.gating.pop(cid, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        built = self.built.pop(cid, None)
        if built is not None:
            self._free.append(built.worktree)

    def _remove(self, worktree: Path) -> None:
        if worktree.exists():
            with contextlib.suppress(FlowdError):
                self.ctx.repo.worktree_remove(worktree, force=True)
        shutil.rmtree(
            worktree.parent if worktree.parent.parent == self.root else worktree, ignore_errors=True
        )
        with contextlib.suppress(OSError):
            self.root.rmdir()  # the last one: no `_train` folder is left beside the epic's

    # -- landing and sending back ---------------------------------------------------------------
    async def _land(self, step: rules.Land) -> None:
        """Fast-forward the epic to the green candidate's tip; each story its `StoryMerged`."""
        ctx, repo = self.ctx, self.ctx.repo
        built = self.built.pop(step.cid)
        async with ctx.merge_lock:
            head = await asyncio.to_thread(repo.head, ctx.epic_branch)
            write_model_atomic(landing_path(ctx.paths), Landing(base=head, tip=built.tip))
            try:
                await asyncio.to_thread(
                    epic_worktree.land, repo, ctx.epic_wt, ctx.epic_branch, built.tip, head
                )
            except FlowdError as exc:
                landing_path(ctx.paths).unlink(missing_ok=True)
                self._fail_lanes(
                    step.lanes, Halt(f"could not move {ctx.epic_branch} to the gated candidate: {exc}")
                )
                return
            if ctx.detect is not None:
                ctx.detect.epic_settled()  # flowd's own move (docs/sandbox-detection.md)
            for story in step.lanes:
                state = load_state(ctx.paths, story)
                if state is not None:
                    save_state(ctx.paths, state.model_copy(update={"status": "merged", "reason": None}))
            landing_path(ctx.paths).unlink(missing_ok=True)
        self.saved_ms += max(0, len(step.lanes) - 1) * self._mean_gate_ms()
        for story in step.lanes:
            waiter = self.waiters.pop(story, None)
            commit = built.commits.get(story, built.tip)
            branch = waiter.branch if waiter is not None else ctx.story_branch(story)
            ctx.emit(StoryMerged(lane=story, branch=branch, commit=commit))
            ctx.emit(StageCompleted(stage=f"story {story}: merge", lane=story))
            if waiter is not None and not waiter.done.done():
                waiter.done.set_result(commit)
        self._free.append(built.worktree)

    def _mean_gate_ms(self) -> int:
        return int(sum(self.gate_ms) / len(self.gate_ms)) if self.gate_ms else 0

    def _fail_lanes(self, lanes: tuple[str, ...], exc: Exception) -> None:
        for story in lanes:
            waiter = self.waiters.pop(story, None)
            if waiter is not None and not waiter.done.done():
                waiter.done.set_exception(exc)

    def _send_back(self, step: rules.SendBack) -> None:
        ctx, story = self.ctx, step.story
        if step.bisected:
            ctx.emit(MergeBisect(batch=step.batch, lanes=[story], culprit=story))
        reason = f"epic gates failed after merging; merge undone:\n{step.output}"
        ctx.emit(MergeRolledBack(lane=story, reason=reason[:2000]))
        ctx.emit(StageFailed(stage=f"story {story}: merge", lane=story, error="epic gates red"))
        waiter = self.waiters.pop(story, None)
        if waiter is not None and not waiter.done.done():
            waiter.done.set_exception(RedMerge(step.gate, step.output))


class _Conflict(Exception):
    def __init__(self, story: str, detail: str) -> None:
        super().__init__(detail)
        self.story, self.detail = story, detail
