"""One story's life: prepare its worktree (hash-guarded resume), catch up, set up, plan its tasks,
run the task loop, judge, repair the perimeter, and merge into the epic behind the gates.

Every failure inside a story becomes that story's outcome by the failure policy
(engine/core/failure.py); only a halt stops the run's launching. The resume decision is
engine/core/resume.py's; `engine/story_prepare.py` gathers its facts and does the git work of
preparing the worktree, `engine/story_merge.py` catches up, repairs the perimeter, merges and
cleans up. Blocking git work runs in threads so stories proceed side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable

from flowd.engine import prompts
from flowd.engine.context import RunContext
from flowd.engine.core.approval import approval_due, is_approved
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
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
from flowd.engine.held_coder import HeldCoder
from flowd.engine.reopen import reopen_with_revision
from flowd.engine.state import (
    StoryState,
    append_findings,
    load_state,
    save_state,
)
from flowd.engine.story_merge import catch_up, clean_up_at, merge, repair_perimeter
from flowd.engine.story_prepare import bootstrap, check_out, prepare, setup
from flowd.engine.taskloop import TaskLoop
from flowd.engine.train import RedMerge
from flowd.events.model import (
    Info,
    MergeRevision,
    StoryStatus,
    StoryStatusChanged,
)
from flowd.events.statuses import lane_status_of
from flowd.plan.model import Story
from flowd.tasks.model import Task, TaskPlan

__all__ = ["RedMerge", "StoryOutcome", "StoryRun"]

# Appends a revision task (subject, lead, findings) to a story's task plan; None: it has none.
AppendRevision = Callable[[str, str, str], Task | None]


class StoryRun:
    def __init__(
        self,
        ctx: RunContext,
        story: Story,
        *,
        later: Callable[[Callable[[], Awaitable[None]]], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.story = story
        # Where a merged story's lane ends (its agents stopped, its worktree given back): handed to
        # `later` (the lanes engine runs it and waits for it before the run ends) so its dependents
        # start at once; else done here.
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
        ctx.pool.lane_started(story)
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
            ctx.pool.lane_ended(story)  # nor its helper clones: a new lane takes them first

    async def _pipeline(self) -> StoryOutcome:
        ctx, story = self.ctx, self.story.id
        if (placing := ctx.placing_ahead.get(story)) is not None:
            await placing.wait()  # its lane being made ahead (engine/ahead.py): that worktree is its
        # The epic head is only read under the merge lock: between a merge and its epic gates it is
        # a commit no gate has passed (and may be rolled back), which no story may start from,
        # catch up with or restore paths from. The worktree and its catch-up take it once: queued
        # again to catch up, a story waited behind every other starting lane's worktree, the run's
        # first story on the critical chain too (docs/performance.md, "The first story's start").
        async with ctx.merge_lock:
            merged_before = await asyncio.to_thread(prepare, self)
            if not merged_before:
                await asyncio.to_thread(catch_up, self)
        if merged_before:
            self.info("already merged; skipping")
            return StoryOutcome(story, "done", branch=self.branch, note=merged_before)
        await asyncio.to_thread(check_out, self)
        # Leased once its worktree exists: a lane the editors show with its coder has one.
        coder = await self._lease_coder()
        if not ctx.paths.checkpoint(story).exists():  # it plans first: its planner's agent starts now
            ctx.pool.warm_ahead("planner", label=story, cwd=self.worktree)
        await bootstrap(self)
        await setup(self)
        loop = TaskLoop(ctx, self.story, self.worktree, coder)
        await loop.plan_tasks()
        self.rounds_before = rounds_not_counted(loop.plan, self.resumed_from)
        if (round_ := resuming_round(loop.plan)) is not None and self.resumed_from != "failed":
            self.info(f"resuming merge revision {round_}")
        note: str | None = None
        while True:
            await loop.run_tasks()
            if ctx.tasks_done is not None and not self._approval_due(loop):
                # A dependent's lane may be made now (engine/ahead.py); not for a story about to
                # wait for a person's approval, maybe for hours: then when it enters the train.
                ctx.tasks_done(story)
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
                        await asyncio.to_thread(catch_up, self)
                        repaired = await asyncio.to_thread(repair_perimeter, self)
                if admitted:
                    coder.release()
                    # Its helper turns are over: a story launched when this one merges (before
                    # this lane ends) takes this lane's clones, not a running lane's.
                    ctx.pool.lane_ended(story)
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
        if self.later is not None:
            # Merged: its dependents launch now, while its agents stop and its worktree goes back
            # (a spare a dependent waits for rather than adding one: engine/spares.py).
            if ctx.spares is not None:
                ctx.spares.expect()
            self.later(functools.partial(self._give_back, expected=ctx.spares is not None))
        else:
            await self._give_back(expected=False)
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
        ctx.pool.lane_started(story)
        coder = await self._lease_coder()
        loop.rebind(coder)
        async with ctx.merge_lock:
            await asyncio.to_thread(catch_up, self)
        await setup(self)
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
        """One coder clone for the rest of the story, preferring the executor that last held it."""
        ctx, story = self.ctx, self.story.id
        assert self.state is not None
        lease = await ctx.pool.lease("coder", label=story, prefer=self.state.executor)
        # Its agent starts for this lane while the story plans its tasks.
        ctx.pool.warm_for(lease, self.worktree)
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
        status: StoryStatus = lane_status_of(outcome.status)
        if outcome.pause == "merge":  # its work is done: it waits for approval to merge
            status, reason = "ready", f"waiting for approval: {outcome.reason}"
        ctx.emit(StoryStatusChanged(story=self.story.id, status=status, reason=reason))
        return outcome

    async def _merge(self) -> str:
        # A lane elsewhere (engine/lanes/node_lane.py) pushes its branch here instead.
        return await merge(self)

    async def _give_back(self, *, expected: bool) -> None:
        """The merged story's lane ends: its idle agent processes stop (none confined to the
        worktree may outlive it, docs/repositories.md "Worktree reuse"), then its worktree becomes
        a spare (a rename) or, with no pool of spares, is removed. `expected`: the pool was told
        it is coming (`Spares.expect`), and is told it is over."""
        try:
            await self.ctx.pool.leave_lane(self.worktree)
            await asyncio.to_thread(clean_up_at, self, self.worktree)
        finally:
            if expected and self.ctx.spares is not None:
                self.ctx.spares.arrived()


def _joined(first: list[str], then: list[str]) -> list[str]:
    """Two executor chains as one, an executor that carries on named once (`a → b`, not `a → a → b`)."""
    out: list[str] = []
    for executor in [*first, *then]:
        if not out or out[-1] != executor:
            out.append(executor)
    return out
