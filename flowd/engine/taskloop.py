"""Inside a story: plan its tasks, run each with the held coder until the gates, the perimeter and
the reviewer are satisfied, commit per task, then judge the story against its acceptance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from flowd.engine import prompts
from flowd.engine.context import Halt, HeldCoder, RunContext
from flowd.engine.gates import run_gates
from flowd.engine.state import append_findings
from flowd.events import (
    Info,
    JudgeIssue,
    PerimeterViolation,
    PlannedTask,
    StageCompleted,
    StageStarted,
    StoryJudged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
)
from flowd.fsio import write_text_atomic
from flowd.perimeter import classify, owner_of_path
from flowd.plan.graph import dependencies_of, dependents_of
from flowd.plan.model import Story
from flowd.replies import ReplyParseError, Verdict, coder_sentinel, parse_task_plan, parse_verdict
from flowd.tasks.checkpoint import parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import depends_on, owns, satisfies

T = TypeVar("T")
DIFF_CHARS = 60_000


class StoryFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoryWaiting(Exception):
    """The story stops as waiting (a genuine BLOCKED_ON): not a failure of its own."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _clip(text: str, limit: int = DIFF_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


class TaskLoop:
    def __init__(self, ctx: RunContext, story: Story, worktree: Path, coder: HeldCoder) -> None:
        self.ctx = ctx
        self.story = story
        self.worktree = worktree
        self.coder = coder
        self.plan = TaskPlan(story_id=story.id)
        self.perimeter_pushed = False
        self.rebutted = False
        self.rules = prompts.story_rules(ctx.plan, story, worktree)

    @property
    def sid(self) -> str:
        return self.story.id

    def info(self, message: str) -> None:
        self.ctx.emit(Info(lane=self.sid, message=message))

    # -- structured replies --------------------------------------------------------------------
    async def _structured(
        self, role: str, prompt: str, parse: Callable[[str], T], *, task: str | None = None
    ) -> T:
        """Ask a role for a structured reply; a reply that does not parse is asked again once."""
        request = self.ctx.request(role, prompt, self.worktree, self.sid, task)
        result = await self.ctx.ask(role, request, lane=self.sid)
        try:
            return parse(result.text)
        except ReplyParseError as first:
            retry = f"{prompt}\n\n{prompts.REPLY_RETRY.format(error=first)}"
            result = await self.ctx.ask(
                role, self.ctx.request(role, retry, self.worktree, self.sid, task), lane=self.sid
            )
            try:
                return parse(result.text)
            except ReplyParseError as second:
                raise StoryFailed(f"the {role}'s reply could not be used twice: {second}")

    # -- planning ------------------------------------------------------------------------------
    async def plan_tasks(self) -> None:
        checkpoint = self.ctx.paths.checkpoint(self.sid)
        if checkpoint.exists():
            text = await asyncio.to_thread(checkpoint.read_text, "utf-8")
            self.plan = parse_checkpoint(text, str(checkpoint))
            if self.plan.tasks:
                self.info(f"resuming at task {self._next_index()} of {len(self.plan.tasks)}")
                self._announce()
                return
        stage = f"story {self.sid}: plan tasks"
        self.ctx.emit(StageStarted(stage=stage, lane=self.sid))
        if self.ctx.pool.can_ever_serve("planner"):
            planned = await self._structured(
                "planner", prompts.planner_prompt(self.story), lambda text: parse_task_plan(text, self.sid)
            )
        else:
            planned = TaskPlan(story_id=self.sid)
        if not planned.tasks:
            planned = TaskPlan(
                story_id=self.sid, tasks=[Task(title=self.story.title, description=self.story.description)]
            )
        self.plan = planned.model_copy(update={"story_id": self.sid})
        self._save()
        self.ctx.emit(StageCompleted(stage=stage, lane=self.sid))
        self._announce()

    def _next_index(self) -> int:
        found = self.plan.next_incomplete()
        return found[0] if found else len(self.plan.tasks)

    def _save(self) -> None:
        write_text_atomic(self.ctx.paths.checkpoint(self.sid), render_checkpoint(self.plan))

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
        self.ctx.emit(TasksPlanned(lane=self.sid, tasks=tasks))

    # -- the loop ------------------------------------------------------------------------------
    async def run_tasks(self) -> None:
        while (found := self.plan.next_incomplete()) is not None:
            stop = self.ctx.budget_stop(self.sid)
            if stop is not None:
                raise Halt(stop)
            index, task = found
            count = len(self.plan.tasks)
            lease = self.coder.lease
            self.ctx.emit(
                TaskStarted(
                    lane=self.sid,
                    index=index,
                    count=count,
                    title=task.title,
                    satisfies=satisfies(task.description) or None,
                    executor=lease.executor_id,
                    clone=lease.clone,
                )
            )
            await self._run_task(index, task)
            self.plan = self.plan.completing(index)
            self._save()
            self.ctx.emit(TaskCompleted(lane=self.sid, index=index, count=count, title=task.title))

    def _plan_listing(self, current: int) -> str:
        lines = []
        for index, task in enumerate(self.plan.tasks, start=1):
            mark = "x" if task.completed else (">" if index == current else " ")
            lines.append(f"[{mark}] {index}. {task.title}")
        return "\n".join(lines)

    async def _coder(self, prompt: str, task: Task, index: int) -> str:
        request = self.ctx.request("coder", prompt, self.worktree, self.sid, task.title, index)
        result = await self.coder.turn(request)
        return result.text

    async def _run_task(self, index: int, task: Task) -> None:
        ctx, repo = self.ctx, self.ctx.repo
        prompt = prompts.CODER_TASK.format(
            rules=self.rules,
            index=index,
            count=len(self.plan.tasks),
            plan=self._plan_listing(index),
            title=task.title,
            description=self.plan.prompt_for(task),
        )
        reply = await self._coder(prompt, task, index)
        reply = await self._check_blocked(reply, task, index)
        if not await asyncio.to_thread(repo.status_paths, self.worktree):
            reply = await self._coder(prompts.CONFIRM_EMPTY.format(title=task.title), task, index)
            reply = await self._check_blocked(reply, task, index)
            if not await asyncio.to_thread(repo.status_paths, self.worktree):
                if coder_sentinel(reply).already_satisfied:
                    self.info(f"task {index} ({task.title}): already satisfied; ticked without a commit")
                    return
                raise StoryFailed(
                    f"task {index} ({task.title}) changed nothing, and the coder did not confirm it was already satisfied"
                )
        rounds = 0
        while True:
            feedback = await self._task_feedback(index, task)
            if not feedback:
                break
            if rounds >= ctx.settings.max_review_rounds:
                text = "\n\n".join(feedback)
                append_findings(
                    ctx.paths, self.sid, f"## Task {index}: {task.title} — still blocking\n\n{text}"
                )
                raise StoryFailed(
                    f"task {index} ({task.title}) still fails after {rounds} fix round(s):\n{text}"
                )
            rounds += 1
            reply = await self._coder(
                prompts.FIX_FEEDBACK.format(title=task.title, feedback="\n\n".join(feedback)), task, index
            )
            await self._check_blocked(reply, task, index)
        await asyncio.to_thread(repo.commit_all, self.worktree, f"{self.sid}: {task.title}")

    async def _task_feedback(self, index: int, task: Task) -> list[str]:
        """What still blocks the task: the perimeter (once per story), red gates, the review."""
        ctx, repo = self.ctx, self.ctx.repo
        feedback: list[str] = []
        changed = await asyncio.to_thread(repo.changed_files, self.worktree, ctx.epic_branch)
        strays = classify(changed, self.sid, ctx.plan)
        if strays:
            ctx.emit(PerimeterViolation(lane=self.sid, paths=strays, action="flagged"))
            if not self.perimeter_pushed:
                self.perimeter_pushed = True
                listing = "\n".join(f"- {p.path} ({p.kind})" for p in strays)
                feedback.append(prompts.PERIMETER_FEEDBACK.format(paths=listing))
        red = await run_gates(
            ctx.settings.gates,
            self.worktree,
            where="task",
            lane=self.sid,
            emit=ctx.emit,
            log_dir=ctx.paths.gate_logs(self.sid),
            timeout_s=ctx.settings.gate_timeout_s,
        )
        if red is not None:
            feedback.append(f"The gates are red:\n{red.describe()}")
        if feedback or ctx.settings.max_review_rounds == 0 or not ctx.pool.can_ever_serve("reviewer"):
            return feedback
        diff = await asyncio.to_thread(repo.diff, self.worktree, "HEAD")
        verdict = await self._structured(
            "reviewer",
            prompts.REVIEWER.format(
                title=task.title,
                story_title=self.story.title,
                story_id=self.sid,
                owned="\n".join(f"- {p}" for p in self.story.owned),
                description=task.description,
                diff=_clip(diff) or "(no changes)",
            ),
            parse_verdict,
            task=task.title,
        )
        if verdict.issues:
            append_findings(
                ctx.paths, self.sid, f"## Review of task {index}: {task.title}\n\n{_issues(verdict)}"
            )
        if not verdict.clean:
            feedback.append(f"The reviewer found blocking issues:\n{_issues(verdict)}")
        return feedback

    # -- BLOCKED_ON ----------------------------------------------------------------------------
    def _rebuttal(self, need: str) -> str | None:
        """The plan's answer to a claimed missing dependency, when the plan settles it."""
        plan = self.ctx.plan
        deps = set(dependencies_of(plan, self.sid))
        later = set(dependents_of(plan, self.sid))
        for token in need.replace(",", " ").split():
            path = token.strip("`'\"()[]:;.")
            if "/" not in path and "." not in path:
                continue
            owner = owner_of_path(plan, path)
            if owner == self.sid:
                return f"{path} is under your own owned paths: building it is this story's work"
            if owner in later:
                return f"{path} belongs to story '{owner}', which runs AFTER you: leave it alone"
            if owner in deps:
                dep = plan.require(owner)
                provides = f" That story provides: {', '.join(dep.provides)}." if dep.provides else ""
                return (
                    f"{path} belongs to story '{owner}', merged into the epic branch before you started, "
                    f"so it is already in your working tree.{provides}"
                )
        return None

    async def _check_blocked(self, reply: str, task: Task, index: int) -> str:
        need = coder_sentinel(reply).blocked_on
        if need is None:
            return reply
        rebuttal = None if self.rebutted else self._rebuttal(need)
        if rebuttal is None:
            raise StoryWaiting(f"blocked on unplanned work: {need}")
        self.rebutted = True
        self.info(f"BLOCKED_ON rejected — {rebuttal}")
        reply = await self._coder(prompts.REBUTTAL.format(need=need, rebuttal=rebuttal), task, index)
        again = coder_sentinel(reply).blocked_on
        if again is not None:
            raise StoryWaiting(f"blocked on unplanned work: {again}")
        return reply

    # -- judge ---------------------------------------------------------------------------------
    async def judge(self) -> str | None:
        ctx, repo = self.ctx, self.ctx.repo
        rounds = ctx.settings.judge_rounds
        if rounds == 0 or not ctx.pool.can_ever_serve("judge"):
            return None
        for round_ in range(1, rounds + 1):
            await asyncio.to_thread(repo.commit_all, self.worktree, f"{self.sid}: remaining changes")
            diff = await asyncio.to_thread(repo.diff, self.worktree, ctx.epic_branch)
            empty = not diff.strip()
            subject_kind, subject = "The story's change (a diff against the epic branch)", diff
            if empty:
                subject_kind, subject = (
                    "The story's owned code as it stands (its branch has no changes)",
                    self._owned_code(),
                )
            if empty and not subject.strip():
                verdict = Verdict.of(
                    [
                        JudgeIssue(
                            severity="critical",
                            title=f"nothing exists yet under {', '.join(self.story.owned)}",
                        )
                    ]
                )
            else:
                acceptance = (
                    "\n".join(f"{n}. {a}" for n, a in enumerate(self.story.acceptance, 1)) or "(none given)"
                )
                verdict = await self._structured(
                    "judge",
                    prompts.JUDGE.format(
                        story_title=self.story.title,
                        story_id=self.sid,
                        acceptance=acceptance,
                        provides=", ".join(self.story.provides) or "(nothing named)",
                        subject_kind=subject_kind,
                        subject=_clip(subject),
                    ),
                    parse_verdict,
                )
            ctx.emit(StoryJudged(lane=self.sid, round=round_, clean=verdict.clean, issues=verdict.issues))
            state = "cleared" if verdict.clean else "not cleared"
            append_findings(
                ctx.paths,
                self.sid,
                f"## Judge round {round_} — {state}\n\n{_issues(verdict) or '(no issues)'}",
            )
            if verdict.clean:
                return f"judge cleared (round {round_})"
            revisions = round_ - 1
            if round_ == rounds:
                plural = "revision" if revisions == 1 else "revisions"
                raise StoryFailed(f"judge not cleared after {revisions} {plural}:\n{_issues(verdict)}")
            lead = prompts.EMPTY_REVISION_LEAD if empty else prompts.REVISION_LEAD.format(round=round_)
            number = 1 + sum(1 for t in self.plan.tasks if t.title.startswith("Revision "))
            body = prompts.REVISION_BODY.format(lead=lead, issues=_issues(verdict))
            self.plan = self.plan.appending(
                Task(title=f"Revision {number}: close the judge's findings", description=body)
            )
            self._save()
            self._announce()
            await self.run_tasks()
        return None

    def _owned_code(self, limit: int = 40_000) -> str:
        parts: list[str] = []
        size = 0
        for prefix in self.story.owned:
            root = self.worktree / prefix
            files = (
                [root]
                if root.is_file()
                else sorted(p for p in root.rglob("*") if p.is_file())
                if root.is_dir()
                else []
            )
            for file in files:
                if ".git" in file.parts:
                    continue
                try:
                    text = file.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                rel = file.relative_to(self.worktree)
                chunk = f"--- {rel}\n{text}"
                if size + len(chunk) > limit:
                    parts.append(f"--- {rel} (not shown: over the size limit)")
                    continue
                parts.append(chunk)
                size += len(chunk)
        return "\n".join(parts)


def _issues(verdict: Verdict) -> str:
    return "\n".join(
        f"- [{i.severity}] {i.title}" + (f": {i.description}" if i.description else "")
        for i in verdict.issues
    )
