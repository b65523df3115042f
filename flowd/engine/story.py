"""One story's life: prepare its worktree (hash-guarded resume), catch up, set up, plan its tasks,
run the task loop, judge, repair the perimeter, and merge into the epic behind the gates.

Every failure inside a story becomes that story's outcome by the failure policy
(engine/core/failure.py); only a halt stops the run's launching. The resume decision is
engine/core/resume.py's; this module gathers its facts and does the git work. Blocking git work
runs in threads so stories proceed side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
from collections.abc import Callable
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.engine import prompts
from flowd.engine.bootstrap import describe_prepared, include_path, prepare_lane
from flowd.engine.context import HeldCoder, RunContext
from flowd.engine.core.approval import approval_due, is_approved
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.resume import OnFreshBranch, OnState, merged_before_stop, on_fresh_branch, on_state
from flowd.engine.core.revision import (
    MERGE_SUBJECT,
    OUTPUT_CHARS,
    RevisionsSpent,
    after_red_merge,
    merge_rounds_done,
    resuming_round,
    rounds_not_counted,
)
from flowd.engine.core.stops import AwaitingApproval, StoryFailed
from flowd.engine.gates import run_command
from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.reopen import reopen_with_revision
from flowd.engine.state import (
    EpicPaths,
    StoryState,
    append_findings,
    clear_intent,
    load_intent,
    load_state,
    save_state,
)
from flowd.engine.taskloop import TaskLoop
from flowd.engine.train import Ejected, RedMerge
from flowd.plan.hashing import story_hash
from flowd.plan.model import Story
from flowd.plan.perimeter import classify
from flowd.tasks.model import Task, TaskPlan
from flowd.trace.events import (
    Event,
    Info,
    MergeRevision,
    MergeRolledBack,
    PerimeterViolation,
    StageCompleted,
    StageFailed,
    StageStarted,
    StoryStatus,
    StoryStatusChanged,
    WorktreePrepared,
)
from flowd.vcs import sparse
from flowd.vcs.gitops import Repo

__all__ = ["RedMerge", "StoryOutcome", "StoryRun", "undo_interrupted_merge"]

# Appends a revision task (subject, lead, findings) to a story's task plan; None: it has none.
AppendRevision = Callable[[str, str, str], Task | None]


class StoryRun:
    def __init__(
        self, ctx: RunContext, story: Story, *, later: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        self.ctx = ctx
        self.story = story
        # Where a merged story's worktree removal goes: handed to `later` (the lanes engine runs it
        # and waits for it before the run ends) so its dependents start at once; else done here.
        self.later = later
        self.branch = ctx.story_branch(story.id)
        self.worktree = ctx.story_worktree(story.id)
        self.state: StoryState | None = None
        self.coder: HeldCoder | None = None
        self.resumed_from: str | None = None  # the saved state's status when the story resumed
        self.rounds_before = 0  # merge revisions of an earlier, failed attempt (not counted)

    def info(self, message: str) -> None:
        self.ctx.emit(Info(lane=self.story.id, message=message))

    async def run(self) -> StoryOutcome:
        ctx, story = self.ctx, self.story.id
        ctx.emit(StoryStatusChanged(story=story, status="active"))
        try:
            return self._finish(await self._pipeline())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # What stopped the story becomes its outcome by the failure policy (engine/core/failure.py).
            chain = self.coder.chain if self.coder else []
            facts = StoryFacts(story, self.branch, chain, pause_on=ctx.pause_on)
            return self._finish(outcome_of(exc, facts))
        finally:
            if self.coder is not None:
                self.coder.release()
            ctx.ports.release(story)  # the lane no longer runs: its ports are free

    async def _pipeline(self) -> StoryOutcome:
        ctx, story = self.ctx, self.story.id
        # The epic head is only read under the merge lock: between a merge and its epic gates it is
        # a commit no gate has passed (and may be rolled back), which no story may start from,
        # catch up with or restore paths from.
        async with ctx.merge_lock:
            merged_before = await asyncio.to_thread(self._prepare)
        if merged_before:
            self.info("already merged; skipping")
            return StoryOutcome(story, "done", branch=self.branch, note=merged_before)
        coder = await self._lease_coder()
        async with ctx.merge_lock:
            await asyncio.to_thread(self._catch_up)
        await self._bootstrap()
        await self._setup()
        loop = TaskLoop(ctx, self.story, self.worktree, coder)
        await loop.plan_tasks()
        self.rounds_before = rounds_not_counted(loop.plan, self.resumed_from)
        if (round_ := resuming_round(loop.plan)) is not None and self.resumed_from != "failed":
            self.info(f"resuming merge revision {round_}")
        note: str | None = None
        while True:
            await loop.run_tasks()
            if not self._approved(loop):  # an approved story was judged before it asked
                note = await loop.judge() or note
            self._ask_approval(loop)
            red: RedMerge | None = None
            while True:
                # Catch-up and perimeter repair in one hold of the merge lock; review comments that
                # came while it was judged or waited its turn go first; once it is ready to merge,
                # it takes no more (docs/answers.md: revisions).
                async with ctx.merge_lock:
                    admitted = ctx.reviews.close_if_idle(story)
                    if admitted:
                        await asyncio.to_thread(self._catch_up)
                        repaired = await asyncio.to_thread(self._repair_perimeter)
                if admitted:
                    coder.release()
                    try:
                        commit = await self._merge()
                    except RedMerge as undone:
                        red = undone
                    break
                await loop.run_tasks()
                note = await loop.judge() or note
                self._ask_approval(loop)
            if red is not None:
                coder = await self._revise(loop, red)
                continue
            break
        if self.later is not None and ctx.spares is None:
            self.later(self._clean_up)
        else:
            # With a pool of spares this is a rename, done before its dependents start: the
            # worktree is theirs to take (docs/repositories.md "Worktree reuse"), and no agent
            # process confined to it lives on.
            await ctx.pool.leave_lane(self.worktree)
            await asyncio.to_thread(self._clean_up)
        # A repair changed the story's work behind everyone's back: the report says so first.
        note = "; ".join(filter(None, [repaired, note or f"merged at {commit[:10]}"]))
        return StoryOutcome(story, "done", branch=self.branch, note=note, executors=coder.chain)

    def _approved(self, loop: TaskLoop) -> bool:
        return is_approved(self.state.approved if self.state is not None else None, len(loop.plan.tasks))

    def _approval_due(self, loop: TaskLoop) -> bool:
        approved = self.state.approved if self.state is not None else None
        return approval_due(self.ctx.pause_on, approved, len(loop.plan.tasks))

    def _ask_approval(self, loop: TaskLoop) -> None:
        """The hook before the merge queue (`pauseOn` `merge`, docs/answers.md): a story whose
        current plan has no approval yet stops here and waits `ready` (the rule is
        engine/core/approval.py's); approved, it goes on to merge."""
        if self._approval_due(loop):
            raise AwaitingApproval(len(loop.plan.tasks))

    async def _revise(self, loop: TaskLoop, red: RedMerge) -> HeldCoder:
        """The merge was undone on red epic gates: reopen the story with a merge revision task (or
        fail), then take its work up again in this worktree with its coder leased again."""
        ctx, story = self.ctx, self.story.id
        self.reopen_after_red(red, loop.plan, loop.append_revision, "sending it back to catch up and fix")
        ctx.reviews.reopen(story)  # not merged after all: review comments are welcome again
        coder = await self._lease_coder()
        loop.rebind(coder)
        async with ctx.merge_lock:
            await asyncio.to_thread(self._catch_up)
        await self._setup()
        return coder

    def reopen_after_red(self, red: RedMerge, plan: TaskPlan, append: AppendRevision, then: str) -> None:
        """Every lane's one answer to a red merge (already undone), local or elsewhere: the story's
        next merge revision task, appended by `append` to its task plan `plan` and announced; or
        StoryFailed when its rounds are spent (engine/core/revision.py decides) and `red` itself when
        it has no task plan to reopen. `then` says what happens next."""
        limit = self.ctx.settings.merge_revision_rounds
        decision = after_red_merge(merge_rounds_done(plan) - self.rounds_before, limit, red.output)
        if isinstance(decision, RevisionsSpent):
            raise StoryFailed(decision.reason)
        lead = prompts.MERGE_REVISION_LEAD.format(round=decision.round, limit=limit, red=red.output)
        # The task is in the checkpoint before the event: a run killed from here on resumes it.
        if append(MERGE_SUBJECT, lead, "- the epic gates above") is None:
            raise red
        self.announce_revision(red, decision.round, then)

    def announce_revision(self, red: RedMerge, round_: int, then: str) -> None:
        """A merge revision begins (its task is in the checkpoint): the event, the findings, a line."""
        ctx, story, limit = self.ctx, self.story.id, self.ctx.settings.merge_revision_rounds
        ctx.emit(MergeRevision(lane=story, round=round_, gate=red.gate, output=red.output[:OUTPUT_CHARS]))
        with contextlib.suppress(OSError):
            append_findings(
                ctx.paths,
                story,
                f"## Epic gates after merging — red, merge undone; revising "
                f"(merge revision {round_} of {limit})\n\n{red.output}",
            )
        self.info(f"epic gates red after merging; merge undone, {then} (merge revision {round_} of {limit})")

    async def merge_pushed(
        self, pushed: StoryOutcome, plan: TaskPlan, rounds_before: int
    ) -> StoryOutcome | None:
        """The runner's half of a lane that ran elsewhere (docs/scale-out.md): its branch, fetched from
        the remote, merges here behind the epic gates; the story's state is the lane's, mirrored, and
        `plan` its task checkpoint as the runner holds it. None: the merge was red and undone, and
        the checkpoint holds the merge revision task for the lane's next placement (as a local
        story's red merge, `reopen_after_red`, with `rounds_before` not counted)."""
        ctx, story = self.ctx, self.story.id
        self.state = load_state(ctx.paths, story)
        self.rounds_before = rounds_before
        try:
            if self.state is None:
                raise StoryFailed(f"story '{story}' came back from its lane without a state; run again")
            try:
                commit = await self._merge()
            except RedMerge as red:
                append = functools.partial(reopen_with_revision, ctx.paths, story)
                self.reopen_after_red(red, plan, append, "placing its lane again to catch up and fix")
                return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self.stopped_by(exc, pushed.executors)
        note = pushed.note if pushed.note and "merged" in pushed.note else f"merged at {commit[:10]}"
        return self._finish(
            StoryOutcome(story, "done", branch=self.branch, note=note, executors=pushed.executors)
        )

    def stopped_by(self, exc: Exception, executors: list[str]) -> StoryOutcome:
        """The outcome of the story stopped by `exc` (the failure policy), saved and said."""
        return self._finish(outcome_of(exc, StoryFacts(self.story.id, self.branch, executors)))

    async def _lease_coder(self) -> HeldCoder:
        """One coder clone for the whole story, preferring the executor that last held it."""
        ctx, story = self.ctx, self.story.id
        assert self.state is not None
        lease = await ctx.pool.lease("coder", label=story, prefer=self.state.executor)
        before = self.coder.chain if self.coder is not None else []
        self.coder = HeldCoder(ctx, story, lease)
        # A story re-leases its coder for a merge revision: one executor chain over both leases.
        self.coder.chain[:] = _joined(before, self.coder.chain)
        if self.state.executor != lease.executor_id:
            self.state = self.state.model_copy(update={"executor": lease.executor_id})
            save_state(ctx.paths, self.state)
        return self.coder

    def _finish(self, outcome: StoryOutcome) -> StoryOutcome:
        ctx = self.ctx
        if outcome.status == "failed" and self.state is not None and self.state.status != "merged":
            with contextlib.suppress(OSError):
                save_state(
                    ctx.paths, self.state.model_copy(update={"status": "failed", "reason": outcome.reason})
                )
        if outcome.status == "failed":
            with contextlib.suppress(OSError):
                append_findings(ctx.paths, self.story.id, f"## Failed\n\n{outcome.reason}")
        reason = outcome.reason
        if outcome.status == "paused":  # waits on a person (docs/answers.md)
            reason = f"paused ({outcome.pause}): {outcome.reason}"
        status: StoryStatus = "waiting"
        if outcome.pause == "merge":  # its work is done: it waits for approval to merge
            status, reason = "ready", f"waiting for approval: {outcome.reason}"
        elif outcome.status in ("done", "failed"):
            status = "done" if outcome.status == "done" else "failed"
        ctx.emit(StoryStatusChanged(story=self.story.id, status=status, reason=reason))
        return outcome

    # -- prepare -------------------------------------------------------------------------------
    def _prepare(self) -> str | None:
        """Make the worktree ready; returns a note when the story was merged on a previous run.

        The decisions are engine/core/resume.py's; this carries them out with git."""
        ctx, story = self.ctx, self.story
        digest = story_hash(story)
        state = load_state(ctx.paths, story.id)
        decision = on_state(state, digest)
        if decision is OnState.START_OVER:
            assert state is not None
            self.info("plan entry changed since its branch was created; starting over")
            self._discard(Path(state.worktree), state.branch)
        if decision is OnState.MERGED:
            assert state is not None
            self.state = state
            self._finish_clean_up(Path(state.worktree))
            return "merged on a previous run"
        if decision is OnState.RESUME:
            assert state is not None
            self.resumed_from = state.status
            return self._resume(state)
        self._start(digest)
        return None

    def _finish_clean_up(self, worktree: Path) -> None:
        # A runner killed between the merge and its clean-up left the worktree, or killed in the
        # middle of `git worktree remove` left git's record of it: finish the job.
        if worktree.exists():
            self._clean_up_at(worktree)
        else:
            with contextlib.suppress(FlowdError):
                self.ctx.repo.worktree_prune()

    def _start(self, digest: str) -> None:
        ctx, repo = self.ctx, self.ctx.repo
        base = repo.head(ctx.epic_branch)
        exists = repo.branch_exists(self.branch)
        # A branch with no state: a run killed between creating it and saving its state.
        choice = on_fresh_branch(exists, exists and repo.is_ancestor(self.branch, ctx.epic_branch))
        if choice is OnFreshBranch.DISCARD:
            self._discard(self.worktree, self.branch)
        elif choice is OnFreshBranch.REUSE:
            self.info(f"reusing the existing branch {self.branch} (it holds work the epic lacks)")
            base = repo.rev_parse(f"{ctx.epic_branch}") or base
        if ctx.spares is not None and choice is not OnFreshBranch.REUSE:
            # A leftover at its path reset in place, else a spare's, else a new one.
            how = ctx.spares.take(
                self.worktree,
                self.branch,
                ctx.epic_branch,
                include_path(repo, ctx.settings),
                cone=ctx.cone(self.story.id, ctx.epic_branch),
            )
            if how != "added":
                self.info(f"its worktree is a used one, reset to {ctx.epic_branch} ({how})")
        # Asked again: a discard that could not remove the branch leaves it to check out.
        elif repo.branch_exists(self.branch):
            repo.worktree_add(self.worktree, self.branch)
        else:
            repo.worktree_add(self.worktree, self.branch, start=ctx.epic_branch)
        self.state = StoryState(
            id=self.story.id,
            hash=digest,
            branch=self.branch,
            worktree=str(self.worktree),
            status="started",
            base=base,
        )
        save_state(ctx.paths, self.state)

    def _resume(self, state: StoryState) -> str | None:
        ctx, repo = self.ctx, self.ctx.repo
        stored = Path(state.worktree)
        if stored != self.worktree and (stored / ".git").is_file():
            repo.worktree_move(stored, self.worktree)
            self.info(f"moved its worktree to {self.worktree}")
        repo.worktree_add(self.worktree, self.branch)
        if ctx.spares is not None:  # a local lane: its folders, as the settings say now
            sparse.apply_cone(self.worktree, ctx.cone(self.story.id, self.branch))
        stale = repo.clear_stale_index_lock(self.worktree)
        if stale is not None:
            self.info(f"removed {stale}, left by a git command the previous run was killed in")
        head = repo.head(self.branch)
        moved = state.base is not None and head != state.base
        if merged_before_stop(state.base, head, moved and repo.is_ancestor(self.branch, ctx.epic_branch)):
            self.state = state.model_copy(update={"status": "merged", "worktree": str(self.worktree)})
            save_state(ctx.paths, self.state)
            self._clean_up_at(self.worktree)
            return "merged before the previous run stopped"
        self.state = state.model_copy(
            update={"status": "started", "worktree": str(self.worktree), "reason": None}
        )
        save_state(ctx.paths, self.state)
        self.info(f"resuming {self.branch}")
        return None

    def _discard(self, worktree: Path, branch: str) -> None:
        paths, repo = self.ctx.paths, self.ctx.repo
        problem: str | None = None
        if self.ctx.spares is not None and worktree == self.worktree and (worktree / ".git").is_file():
            # Kept for `_start` to reset in place (a remove then add rewrites every file).
            try:
                repo.detach(worktree)
                repo.delete_branch(branch, force=True)
            except FlowdError:
                problem = repo.discard_worktree(worktree, branch)
        else:
            problem = repo.discard_worktree(worktree, branch)
        if problem is not None:
            self.info(f"could not remove the old worktree cleanly: {problem}")
        stale_answers = paths.checkpoint(self.story.id).with_name(f"{self.story.id}.answers.md")
        for stale in (paths.checkpoint(self.story.id), paths.state(self.story.id), stale_answers):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    def _catch_up(self) -> None:
        ctx, repo = self.ctx, self.ctx.repo
        if repo.is_ancestor(ctx.epic_branch, self.branch):
            return
        if repo.is_dirty(self.worktree):
            repo.commit_all(self.worktree, f"{self.story.id}: work in progress")
        message = f"{self.story.id}: catch up with {ctx.epic_branch}"
        result = repo.merge(self.worktree, ctx.epic_branch, message)
        if not result.ok:
            # The epic holds other stories' paths: there the epic's side wins. A conflict on the
            # story's own paths means someone changed them on the epic outside flowd: never
            # overwrite either side silently.
            own = [p for p in result.conflicts if not classify([p], self.story.id, ctx.plan)]
            if own:
                raise StoryFailed(
                    f"catching up with {ctx.epic_branch} conflicted on paths story '{self.story.id}' owns "
                    f"({', '.join(own)}): they were changed on {ctx.epic_branch} outside flowd since the "
                    "story started; reconcile them on the story branch or the epic, then run again"
                )
            result = repo.merge(self.worktree, ctx.epic_branch, message, prefer_incoming=True)
        if not result.ok:
            raise StoryFailed(f"catching up with {ctx.epic_branch} conflicted: {', '.join(result.conflicts)}")
        self.info(f"caught up with {ctx.epic_branch}")

    async def _bootstrap(self) -> None:
        """The user's ignored files and the lane's ports (docs/worktree-bootstrap.md), on every
        preparation: a resumed worktree gets the checkout's current files again."""
        story = self.story.id
        ports, copied = await asyncio.to_thread(prepare_lane, self.ctx, story, story, self.worktree)
        self.ctx.emit(WorktreePrepared(lane=story, copied=copied.copied, port=ports.first, ports=ports.ports))
        if copied.skipped:
            self.info(describe_prepared(ports, copied))

    async def _setup(self) -> None:
        ctx, story = self.ctx, self.story.id
        if not ctx.settings.setup:
            return
        stage = f"story {story}: setup"
        ctx.emit(StageStarted(stage=stage, lane=story))
        for number, command in enumerate(ctx.settings.setup, start=1):
            log = ctx.paths.gate_logs(story).parent / "setup" / f"{number}.log"
            async with ctx.step(story, self.worktree):
                result = await run_command(
                    command,
                    self.worktree,
                    log=log,
                    timeout_s=ctx.settings.gate_timeout_s,
                    env=ctx.lane_env(story),
                )
            if not result.ok:
                ctx.emit(StageFailed(stage=stage, lane=story, error=result.describe()[:500]))
                raise StoryFailed(f"setup failed: {result.describe()}")
        ctx.emit(StageCompleted(stage=stage, lane=story))

    # -- perimeter and merge -------------------------------------------------------------------
    def _repair_perimeter(self) -> str | None:
        """Put back what is still outside the story's perimeter; returns what was done, for the report.

        Whoever wrote those paths (the agent, a tool, the user editing the worktree by hand), the
        repair reverts them, so it is never silent: an event (the editor shows it), a line in the
        story's findings and its note in the report.
        """
        ctx, repo, story = self.ctx, self.ctx.repo, self.story.id
        repo.commit_all(self.worktree, f"{story}: remaining changes")
        strays = perimeter_now(repo, ctx.plan, story, self.worktree)
        if not strays:
            return None
        repo.restore_paths(self.worktree, [p.path for p in strays], ctx.epic_branch)
        repo.commit_all(self.worktree, f"{story}: put paths outside the perimeter back")
        ctx.emit(PerimeterViolation(lane=story, paths=strays, action="restored"))
        listed = ", ".join(f"{p.path} ({p.kind})" for p in strays)
        done = (
            f"perimeter repair restored {len(strays)} path(s) outside the story's perimeter "
            f"from {ctx.epic_branch}, undoing their changes: {listed}"
        )
        self.info(done)
        with contextlib.suppress(OSError):
            append_findings(ctx.paths, story, f"## Perimeter repair\n\n{done}")
        left = perimeter_now(repo, ctx.plan, story, self.worktree)
        if left:
            ctx.emit(PerimeterViolation(lane=story, paths=left, action="failed"))
            raise StoryFailed(
                f"story '{story}' changed paths outside its perimeter that could not be put back: "
                + ", ".join(f"{p.path} ({p.kind})" for p in left)
            )
        return done

    async def _merge(self) -> str:
        """Ready to merge: into the merge train (engine/train.py, docs/merging.md), which lands the
        story behind the epic gates (its merge commit) or sends it back (`RedMerge`). A story that
        conflicts with the stories ahead of it catches up with the epic and enters again, twice at
        most."""
        ctx, story = self.ctx, self.story.id
        if ctx.detect is not None:
            # What another lane put in the epic worktree is put back and blamed on that lane, and
            # a story blamed for an escape fails here rather than merge (docs/sandbox-detection.md).
            await asyncio.to_thread(ctx.detect.check_epic_worktree)
            ctx.detect.raise_pending(story)
        for attempt in range(3):
            try:
                commit = await ctx.merge_train().merge(story, self.branch)
            except Ejected as ejected:
                if attempt == 2:
                    raise StoryFailed(
                        f"merging {self.branch} into {ctx.epic_branch} conflicted: {ejected.detail}"
                    ) from None
                self.info(
                    f"its merge conflicted with stories merged ahead of it ({ejected.detail}); catching up"
                )
                async with ctx.merge_lock:
                    await asyncio.to_thread(self._catch_up)
                continue
            self.state = load_state(ctx.paths, story) or self.state
            return commit
        raise AssertionError("unreachable")

    def _clean_up(self) -> None:
        self._clean_up_at(self.worktree)

    def _clean_up_at(self, worktree: Path) -> None:
        repo = self.ctx.repo
        if self.ctx.spares is not None and (worktree / ".git").is_file():
            kept = self.ctx.spares.give(worktree)
            if kept is None:
                return
            # Not a spare: what a removal decides (a killed one's leftovers go, work stays).
        try:
            repo.worktree_remove(worktree)
        except FlowdError as exc:
            try:
                dirty = repo.status_paths(worktree)
            except FlowdError:
                dirty = []
            # Only tracked files missing: a removal killed half-way, nothing of anyone's to keep.
            if not dirty or any((worktree / p).exists() or (worktree / p).is_symlink() for p in dirty):
                self.info(f"kept its worktree: {exc}")
                return
            try:
                repo.worktree_remove(worktree, force=True)
            except FlowdError as again:
                self.info(f"kept its worktree: {again}")
                return
        if worktree.exists() and not (worktree / ".git").exists():
            # What a killed removal left of a merged story's worktree: no longer a checkout.
            shutil.rmtree(worktree, ignore_errors=True)


def _joined(first: list[str], then: list[str]) -> list[str]:
    """Two executor chains as one, an executor that carries on named once (`a → b`, not `a → a → b`)."""
    out: list[str] = []
    for executor in [*first, *then]:
        if not out or out[-1] != executor:
            out.append(executor)
    return out


def undo_interrupted_merge(
    repo: Repo, paths: EpicPaths, epic_wt: Path, emit: Callable[[Event], object]
) -> None:
    """Undo a merge a killed run left on the epic before its gates passed; call with the epic lock held.

    The story itself is untouched (its state says `started` or `failed`), so it resumes and merges
    again, behind the gates this time. A merge the story state already records is kept; an epic
    that moved on since (a user's commit on top) is left alone and said so. An `index.lock` a git
    killed mid-command left in the epic worktree is removed first.
    """
    if (epic_wt / ".git").exists():
        stale = repo.clear_stale_index_lock(epic_wt)
        if stale is not None:
            emit(Info(message=f"removed {stale}, left by a git command the previous run was killed in"))
    intent = load_intent(paths)
    if intent is None:
        return
    if not (epic_wt / ".git").exists():
        clear_intent(paths)
        return
    state = load_state(paths, intent.story)
    story = intent.story
    if state is not None and state.status == "merged":
        clear_intent(paths)
        return
    head = repo.head_of(epic_wt)
    story_head = repo.rev_parse(intent.branch)
    ours = (
        head != intent.checkpoint
        and repo.rev_parse(f"{head}^1") == intent.checkpoint
        and story_head is not None
        and repo.rev_parse(f"{head}^2") == story_head
    )
    if ours or (head == intent.checkpoint and repo.merge_in_progress(epic_wt)):
        repo.reset_hard(epic_wt, intent.checkpoint)
        reason = (
            f"the previous run stopped before the epic gates passed on story '{story}''s merge; "
            "merge undone, the story merges again when it finishes"
        )
        if ours:
            emit(MergeRolledBack(lane=story, reason=reason))
        emit(Info(lane=story, message=reason))
    elif head != intent.checkpoint:
        emit(
            Info(
                lane=story,
                message=f"the previous run stopped while merging story '{story}', and {epic_wt} has moved on "
                "since; its head is kept as it is",
            )
        )
    clear_intent(paths)
