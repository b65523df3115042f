"""Inside a story: plan its tasks, run each with the held coder until the gates, the perimeter and
the reviewer are satisfied, commit per task, then judge the story against its acceptance.

With `taskConcurrency > 1` and a task plan whose `Depends on:` lines allow it, tasks also run
beside the held coder (`flowd.engine.aside`). The work of one task is `flowd.engine.taskbody`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from flowd.base.fsio import open_inside, write_text_atomic
from flowd.engine import prompts
from flowd.engine.aside import TaskGraph
from flowd.engine.context import RunContext
from flowd.engine.core import strays
from flowd.engine.core.revision import Cleared, RevisionsSpent, after_judge, with_revision
from flowd.engine.core.stops import StoryFailed, StoryWaiting
from flowd.engine.held_coder import HeldCoder
from flowd.engine.reopen import revision_description
from flowd.engine.replies import Verdict, parse_task_plan, parse_verdict
from flowd.engine.review import append_revisions
from flowd.engine.state import append_findings
from flowd.engine.taskbody import Seat, TaskBody, clip, issues_text
from flowd.events.model import (
    Info,
    JudgeIssue,
    PlannedTask,
    StageCompleted,
    StageStarted,
    StoryJudged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
)
from flowd.plan.model import Story
from flowd.roster.leasing import Lease
from flowd.tasks.checkpoint import parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import depends_on, has_parallel_tasks, owns, satisfies

__all__ = ["StoryFailed", "StoryWaiting", "TaskLoop"]

OWNED_CODE_CHARS = 40_000


class TaskLoop:
    def __init__(self, ctx: RunContext, story: Story, worktree: Path, coder: HeldCoder) -> None:
        self.ctx = ctx
        self.story = story
        self.worktree = worktree
        self.coder = coder
        self.branch = ctx.story_branch(story.id)
        self.plan = TaskPlan(story_id=story.id)
        self.body = TaskBody(ctx, story, lambda: self.plan)
        env = ctx.lane_env(story.id)
        rules = prompts.story_rules(ctx.plan, story, worktree) + prompts.lane_ports_note(env)
        self.home = Seat(worktree=worktree, coder=coder, rules=rules, env=env)

    @property
    def story_id(self) -> str:
        return self.story.id

    def info(self, message: str) -> None:
        self.ctx.emit(Info(lane=self.story_id, message=message))

    # -- planning ------------------------------------------------------------------------------
    async def plan_tasks(self) -> None:
        checkpoint = self.ctx.paths.checkpoint(self.story_id)
        if checkpoint.exists():
            text = await asyncio.to_thread(checkpoint.read_text, "utf-8")
            self.plan = parse_checkpoint(text, str(checkpoint))
            if self.plan.tasks:
                self.info(f"resuming at task {self._next_index()} of {len(self.plan.tasks)}")
                await self._note_interrupted_work()
                self._announce()
                return
        stage = f"story {self.story_id}: plan tasks"
        self.ctx.emit(StageStarted(stage=stage, lane=self.story_id))
        planned = TaskPlan(story_id=self.story_id)
        if self.ctx.pool.can_ever_serve("planner"):
            planned = await self._within_perimeter(
                await self._ask_planner(prompts.planner_prompt(self.story))
            )
        if not planned.tasks:
            planned = TaskPlan(
                story_id=self.story_id,
                tasks=[Task(title=self.story.title, description=self.story.description)],
            )
        self.plan = planned.model_copy(update={"story_id": self.story_id})
        self._save()
        self.ctx.emit(StageCompleted(stage=stage, lane=self.story_id))
        self._announce()

    async def _ask_planner(self, prompt: str) -> TaskPlan:
        def parse(text: str) -> TaskPlan:
            return parse_task_plan(text, self.story_id)

        return await self.body.structured("planner", prompt, parse, cwd=self.worktree)

    async def _within_perimeter(self, planned: TaskPlan) -> TaskPlan:
        """A plan naming paths outside the story is planned once more, and what still names another
        story's paths is dropped (engine/core/strays.py)."""
        first = strays.after_plan(self.ctx.plan, self.story_id, planned)
        if isinstance(first, strays.Keep):
            return first.plan
        self.info(first.message)
        second = await self._ask_planner(prompts.replan_prompt(self.ctx.plan, self.story, first.strays))
        settled = strays.after_replan(self.ctx.plan, self.story_id, second)
        self.info(settled.message)
        return settled.plan

    async def _note_interrupted_work(self) -> None:
        found = self.plan.next_incomplete()
        if found is None:
            return
        index, task = found
        subjects = await asyncio.to_thread(self.ctx.repo.subjects_since, self.worktree, self.ctx.epic_branch)
        if f"{self.story_id}: {task.title}" in subjects or f"{self.story_id}: work in progress" in subjects:
            self.body.resumed_with_work = index

    def _next_index(self) -> int:
        found = self.plan.next_incomplete()
        return found[0] if found else len(self.plan.tasks)

    def _save(self) -> None:
        write_text_atomic(self.ctx.paths.checkpoint(self.story_id), render_checkpoint(self.plan))

    def _announce(self) -> None:
        tasks = []
        for index, task in enumerate(self.plan.tasks, start=1):
            sat = satisfies(task.description)
            deps = depends_on(task.description, index)
            owned = owns(task.description)
            tasks.append(
                PlannedTask(
                    title=task.title,
                    completed=task.completed,
                    satisfies=sat or None,
                    depends_on=deps or None,
                    owns=owned or None,
                )
            )
        self.ctx.emit(TasksPlanned(lane=self.story_id, tasks=tasks))

    def append_revision(self, subject: str, lead: str, findings: str) -> Task:
        """Reopen the story with `Revision <k>: <subject>` (engine/core/revision.py: no `Depends on:`,
        it waits for every task, at home), saved to the checkpoint before anything runs it."""
        self.plan = with_revision(self.plan, subject, revision_description(lead, findings))
        self._save()
        self._announce()
        return self.plan.tasks[-1]

    def rebind(self, coder: HeldCoder) -> None:
        """Work on with `coder`, the story's coder leased again (a merge revision)."""
        self.coder = coder
        self.home = Seat(worktree=self.worktree, coder=coder, rules=self.home.rules)

    # -- the loop ------------------------------------------------------------------------------
    async def run_tasks(self) -> None:
        self.take_revisions()
        if self.ctx.settings.task_concurrency > 1 and has_parallel_tasks(self.plan):
            await TaskGraph(self).run()
            return
        while (found := self._next_task()) is not None:
            stop = self.ctx.budget_halt(self.story_id)
            if stop is not None:
                raise stop
            index, task = found
            await self.run_home(index, task)
            self.complete(index, task)

    def _next_task(self) -> tuple[int, Task] | None:
        """The next task, after review comments that came meanwhile became tasks (engine/review.py)."""
        self.take_revisions()
        return self.plan.next_incomplete()

    def take_revisions(self) -> None:
        taken = self.ctx.reviews.take(self.story_id)
        if not taken:
            return
        self.plan = append_revisions(self.plan, taken)
        self._save()  # before anything else: the checkpoint naming a comment marks it taken
        self._announce()
        where = ", ".join(f"{r.path}:{r.line}" for r in taken)
        self.info(f"took {len(taken)} review comment(s) as revision task(s): {where}")

    async def run_home(self, index: int, task: Task, *, parallel: bool | None = None) -> None:
        """Task `index` in the story worktree on the held coder, to its commit."""
        self.started(index, task, self.coder.lease, parallel=parallel)
        await self.body.run(self.home, index, task)

    def started(self, index: int, task: Task, lease: Lease, *, parallel: bool | None) -> None:
        """`TaskStarted` for task `index`, at home or aside, on the clone `lease` names."""
        self.ctx.emit(
            TaskStarted(
                lane=self.story_id,
                index=index,
                count=len(self.plan.tasks),
                title=task.title,
                satisfies=satisfies(task.description) or None,
                parallel=parallel,
                executor=lease.executor_id,
                clone=lease.clone,
            )
        )

    def complete(self, index: int, task: Task) -> None:
        self.plan = self.plan.completing(index)
        self._save()
        self.ctx.emit(
            TaskCompleted(lane=self.story_id, index=index, count=len(self.plan.tasks), title=task.title)
        )

    # -- judge ---------------------------------------------------------------------------------
    async def judge(self) -> str | None:
        """Judge rounds; each finding set becomes a revision task. The note, or None without a judge."""
        ctx, repo = self.ctx, self.ctx.repo
        rounds = ctx.settings.judge_rounds
        if rounds == 0 or not ctx.pool.can_ever_serve("judge"):
            return None
        for round_ in range(1, rounds + 1):
            await asyncio.to_thread(
                repo.commit_remaining, self.worktree, f"{self.story_id}: remaining changes"
            )
            diff = await asyncio.to_thread(repo.diff, self.worktree, ctx.epic_branch)
            empty = not diff.strip()
            verdict = await self._verdict(diff, empty)
            ctx.emit(
                StoryJudged(lane=self.story_id, round=round_, clean=verdict.clean, issues=verdict.issues)
            )
            state = "cleared" if verdict.clean else "not cleared"
            append_findings(
                ctx.paths,
                self.story_id,
                f"## Judge round {round_} — {state}\n\n{issues_text(verdict) or '(no issues)'}",
            )
            decision = after_judge(
                round_, rounds, clean=verdict.clean, empty=empty, issues=issues_text(verdict)
            )
            if isinstance(decision, Cleared):
                return decision.note
            if isinstance(decision, RevisionsSpent):
                raise StoryFailed(decision.reason)
            lead = prompts.EMPTY_REVISION_LEAD if empty else prompts.REVISION_LEAD.format(round=round_)
            self.append_revision("close the judge's findings", lead, issues_text(verdict))
            await self.run_tasks()
        return None

    async def _verdict(self, diff: str, empty: bool) -> Verdict:
        """The judge's verdict on the story's diff, or on its owned code when the diff is empty."""
        subject_kind, subject = "The story's change (a diff against the epic branch)", diff
        if empty:
            subject_kind = "The story's owned code as it stands (its branch has no changes)"
            subject = await asyncio.to_thread(self._owned_code)
            if not subject.strip():
                # Nothing to read: no model is needed to say so.
                title = f"nothing exists yet under {', '.join(self.story.owned)}"
                return Verdict.of([JudgeIssue(severity="critical", title=title)])
        acceptance = "\n".join(f"{n}. {a}" for n, a in enumerate(self.story.acceptance, 1)) or "(none given)"
        return await self.body.structured(
            "judge",
            prompts.JUDGE.format(
                story_title=self.story.title,
                story_id=self.story_id,
                acceptance=acceptance,
                provides=", ".join(self.story.provides) or "(nothing named)",
                subject_kind=subject_kind,
                subject=clip(subject),
            ),
            parse_verdict,
            cwd=self.worktree,
        )

    def _owned_code(self, limit: int = OWNED_CODE_CHARS) -> str:
        """The story's owned files as they stand, up to `limit` characters. Read by flowd,
        unconfined, from the lane's worktree: a file or folder that is a link leading out of the
        worktree (an ignored one a lane planted is not committed) is not read (`open_inside`)."""
        parts: list[str] = []
        size = 0
        real_root = os.path.realpath(self.worktree)
        for prefix in self.story.owned:
            root = self.worktree / prefix.rstrip("/*")
            if not (os.path.realpath(root) + "/").startswith(real_root + "/"):
                files = []  # the owned folder itself leads out of the worktree
            elif root.is_file():
                files = [root]
            elif root.is_dir():
                files = sorted(p for p in root.rglob("*") if p.is_file())
            else:
                files = []
            for file in files:
                rel = file.relative_to(self.worktree)
                if ".git" in rel.parts:
                    continue
                with open_inside(file, real_root) as handle:
                    if handle is None:
                        continue
                    # The characters left, in bytes: UTF-8 takes 4 a character at most.
                    cap = max(limit - size - len(f"--- {rel}\n"), 0) * 4
                    data = handle.read(cap + 1)
                try:
                    text = data.decode("utf-8") if len(data) <= cap else None
                except UnicodeDecodeError:
                    continue
                chunk = f"--- {rel}\n{text}"
                if text is None or size + len(chunk) > limit:
                    parts.append(f"--- {rel} (not shown: over the size limit)")
                    continue
                parts.append(chunk)
                size += len(chunk)
        return "\n".join(parts)
