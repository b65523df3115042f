"""One task of a story, from its coder turn to its commit: BLOCKED_ON, empty diffs, the perimeter,
the task-owns gate, the gates and the reviewer, with fix rounds on the same coder.

A task runs on a `Seat`: the story worktree with the story's held coder (home), or a task worktree
beside it with a coder clone leased for that task only (aside, see `flowd.engine.aside`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from flowd.agents.base import TurnRequest, TurnResult
from flowd.engine import prompts
from flowd.engine.context import RunContext
from flowd.engine.core.blocked import rebuttal as plan_rebuttal
from flowd.engine.core.stops import StoryFailed, StoryWaiting
from flowd.engine.pause_desk import told as answered
from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.replies import ReplyParseError, Verdict, coder_sentinel, parse_verdict
from flowd.engine.state import append_findings
from flowd.events.model import Info, PerimeterViolation, TaskOwnsViolation
from flowd.plan.model import Story
from flowd.plan.perimeter import task_owns_violations
from flowd.roster.leasing import Lease
from flowd.tasks.model import Task, TaskPlan
from flowd.vcs.bootstrapped import embedded_repos

T = TypeVar("T")
DIFF_CHARS = 60_000


class Coder(Protocol):
    """What a seat's coder offers: the lease it runs on and one turn at a time."""

    @property
    def lease(self) -> Lease: ...

    async def turn(self, request: TurnRequest) -> TurnResult: ...


@dataclass
class Seat:
    """Where a task runs and on which coder."""

    worktree: Path
    coder: Coder
    rules: str
    aside: bool = False
    owns: list[str] = field(default_factory=list)
    # The story commit a task worktree started from: the task-owns gate compares against it.
    fork: str | None = None
    gate_logs: Path | None = None
    owns_pushed: bool = False
    # The lane's FLOWD_* variables for the seat's gates and coder (docs/worktree-bootstrap.md).
    env: dict[str, str] = field(default_factory=dict)


def clip(text: str, limit: int = DIFF_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def issues_text(verdict: Verdict) -> str:
    return "\n".join(
        f"- [{i.severity}] {i.title}" + (f": {i.description}" if i.description else "")
        for i in verdict.issues
    )


class TaskBody:
    """The per-task work of one story; one instance is shared by its home and aside seats, so the
    perimeter pushback and the BLOCKED_ON rebuttal are each used once per story."""

    def __init__(self, ctx: RunContext, story: Story, plan: Callable[[], TaskPlan]) -> None:
        self.ctx = ctx
        self.story = story
        self._plan = plan
        self.perimeter_pushed = False
        self.rebutted = False
        # The task a killed run was inside, when that run left work for it (a commit of the task,
        # or the work-in-progress commit catch-up makes of a dirty worktree): rerun, it rightly
        # changes nothing more, and its earlier work stands.
        self.resumed_with_work: int | None = None

    @property
    def story_id(self) -> str:
        return self.story.id

    def info(self, message: str) -> None:
        self.ctx.emit(Info(lane=self.story_id, message=message))

    # -- structured replies --------------------------------------------------------------------
    async def structured(
        self, role: str, prompt: str, parse: Callable[[str], T], *, cwd: Path, task: str | None = None
    ) -> T:
        """Ask a role for a structured reply; a reply that does not parse is asked again once."""
        ctx = self.ctx
        result = await ctx.ask(role, ctx.request(role, prompt, cwd, self.story_id, task), lane=self.story_id)
        try:
            return parse(result.text)
        except ReplyParseError as first:
            retry = f"{prompt}\n\n{prompts.REPLY_RETRY.format(error=first)}"
            result = await ctx.ask(
                role, ctx.request(role, retry, cwd, self.story_id, task), lane=self.story_id
            )
            try:
                return parse(result.text)
            except ReplyParseError as second:
                raise StoryFailed(f"the {role}'s reply could not be used twice: {second}")

    # -- one task --------------------------------------------------------------------------------
    def _listing(self, current: int) -> str:
        lines = []
        for index, task in enumerate(self._plan().tasks, start=1):
            mark = "x" if task.completed else (">" if index == current else " ")
            lines.append(f"[{mark}] {index}. {task.title}")
        return "\n".join(lines)

    async def _coder(self, seat: Seat, prompt: str, task: Task, index: int) -> str:
        request = self.ctx.request(
            "coder", prompt, seat.worktree, self.story_id, task.title, index, seat.env or None
        )
        result = await seat.coder.turn(request)
        return result.text

    async def run(self, seat: Seat, index: int, task: Task) -> str | None:
        """Run task `index` to its commit; the commit, or None when the task changed nothing.

        Raises StoryFailed (still blocking after the fix rounds, or an unconfirmed empty task) and
        StoryWaiting (a genuine BLOCKED_ON).
        """
        ctx, repo = self.ctx, self.ctx.repo
        plan = self._plan()
        prompt = prompts.CODER_TASK.format(
            rules=seat.rules,
            index=index,
            count=len(plan.tasks),
            plan=self._listing(index),
            title=task.title,
            description=plan.prompt_for(task),
        )
        told = answered(self.ctx.paths, self.story_id)
        if told:  # answers to this story's BLOCKED_ON pauses (docs/answers.md)
            prompt += prompts.ANSWERED.format(answers="\n".join(f"- {t}" for t in told))
        # HEAD as the task found it: a coder that commits with git itself (an agent's own shell)
        # has still done the work, and the reviewer reads the task's whole change.
        start = await asyncio.to_thread(repo.head_of, seat.worktree)
        reply = await self._coder(seat, prompt, task, index)
        reply = await self.check_blocked(seat, reply, task, index)
        if not await self._changed(seat.worktree, start):
            reply = await self._coder(seat, prompts.CONFIRM_EMPTY.format(title=task.title), task, index)
            reply = await self.check_blocked(seat, reply, task, index)
            if not await self._changed(seat.worktree, start):
                if coder_sentinel(reply).already_satisfied:
                    self.info(f"task {index} ({task.title}): already satisfied; ticked without a commit")
                    return None
                if not seat.aside and index == self.resumed_with_work:
                    self.info(
                        f"task {index} ({task.title}): changed nothing when resumed; "
                        "the interrupted run's work for it stands"
                    )
                    return None
                raise StoryFailed(
                    f"task {index} ({task.title}) changed nothing, and the coder did not confirm "
                    "it was already satisfied"
                )
        rounds = 0
        while True:
            feedback = await self.feedback(seat, index, task, start)
            if not feedback:
                break
            if rounds >= ctx.settings.max_review_rounds:
                text = "\n\n".join(feedback)
                append_findings(
                    ctx.paths, self.story_id, f"## Task {index}: {task.title} — still blocking\n\n{text}"
                )
                raise StoryFailed(
                    f"task {index} ({task.title}) still fails after {rounds} fix round(s):\n{text}"
                )
            rounds += 1
            reply = await self._coder(
                seat,
                prompts.FIX_FEEDBACK.format(title=task.title, feedback="\n\n".join(feedback)),
                task,
                index,
            )
            await self.check_blocked(seat, reply, task, index)
        commit = await asyncio.to_thread(repo.commit_all, seat.worktree, f"{self.story_id}: {task.title}")
        if commit is None and (head := await asyncio.to_thread(repo.head_of, seat.worktree)) != start:
            return head  # the coder committed everything itself
        return commit

    async def _changed(self, wt: Path, start: str) -> bool:
        """Whether the task changed anything: files left in the worktree, or commits of its own."""
        if await asyncio.to_thread(self.ctx.repo.status_paths, wt):
            return True
        return await asyncio.to_thread(self.ctx.repo.head_of, wt) != start

    async def feedback(self, seat: Seat, index: int, task: Task, start: str = "HEAD") -> list[str]:
        """What still blocks the task: the perimeter (once per story), a git repository of its own
        in the worktree, its Owns: paths (aside, once), red gates, the review of its change since
        `start`."""
        ctx, repo = self.ctx, self.ctx.repo
        feedback: list[str] = []
        strays = await asyncio.to_thread(perimeter_now, repo, ctx.plan, self.story_id, seat.worktree)
        if strays:
            ctx.emit(PerimeterViolation(lane=self.story_id, paths=strays, action="flagged"))
            if not self.perimeter_pushed:
                self.perimeter_pushed = True
                listing = "\n".join(f"- {p.path} ({p.kind})" for p in strays)
                feedback.append(prompts.PERIMETER_FEEDBACK.format(paths=listing))
        nested = await asyncio.to_thread(embedded_repos, seat.worktree)
        if nested:
            feedback.append(prompts.NESTED_REPO_FEEDBACK.format(paths="\n".join(f"- {p}/" for p in nested)))
        if seat.owns and seat.fork is not None:
            feedback += await self._owns_gate(seat, index, task)
        red = await ctx.gates(
            seat.worktree,
            where="task",
            lane=self.story_id,
            log_dir=seat.gate_logs or ctx.paths.gate_logs(self.story_id),
            env=seat.env or None,  # a parallel task's own ports, else its lane's
        )
        if red is not None:
            feedback.append(f"The gates are red:\n{red.describe()}")
        if feedback or ctx.settings.max_review_rounds == 0 or not ctx.pool.can_ever_serve("reviewer"):
            return feedback
        diff = await asyncio.to_thread(repo.diff, seat.worktree, start)
        verdict = await self.structured(
            "reviewer",
            prompts.REVIEWER.format(
                title=task.title,
                story_title=self.story.title,
                story_id=self.story_id,
                owned="\n".join(f"- {p}" for p in (seat.owns or self.story.owned)),
                description=task.description,
                diff=clip(diff) or "(no changes)",
            ),
            parse_verdict,
            cwd=seat.worktree,
            task=task.title,
        )
        if verdict.issues:
            append_findings(
                ctx.paths, self.story_id, f"## Review of task {index}: {task.title}\n\n{issues_text(verdict)}"
            )
        if not verdict.clean:
            feedback.append(f"The reviewer found blocking issues:\n{issues_text(verdict)}")
        return feedback

    async def _owns_gate(self, seat: Seat, index: int, task: Task) -> list[str]:
        """A task run aside may change only its `Owns:` paths: another task may be changing the rest."""
        assert seat.fork is not None
        changed = await asyncio.to_thread(self.ctx.repo.changed_files, seat.worktree, seat.fork)
        outside = task_owns_violations(changed, seat.owns)
        if not outside:
            return []
        self.ctx.emit(TaskOwnsViolation(lane=self.story_id, task=task.title, paths=outside))
        listing = "\n".join(f"- {p}" for p in outside)
        if seat.owns_pushed:
            raise StoryFailed(
                f"task {index} ({task.title}) still changes paths outside its Owns: "
                f"({', '.join(seat.owns)}): {', '.join(outside)}"
            )
        seat.owns_pushed = True
        text = prompts.TASK_OWNS_FEEDBACK.format(owns=", ".join(seat.owns), paths=listing)
        append_findings(self.ctx.paths, self.story_id, f"## Task {index}: {task.title} — owns\n\n{text}")
        return [text]

    # -- BLOCKED_ON ----------------------------------------------------------------------------
    async def check_blocked(self, seat: Seat, reply: str, task: Task, index: int) -> str:
        """The reply, unless it ends with `BLOCKED_ON:`; then the plan may send it back once.

        A task run aside never uses the story's rebuttal: it is handed back to the story's coder.
        """
        need = coder_sentinel(reply).blocked_on
        if need is None:
            return reply
        rebuttal = (
            None if (self.rebutted or seat.aside) else plan_rebuttal(self.ctx.plan, self.story_id, need)
        )
        if rebuttal is None:
            raise StoryWaiting(f"blocked on unplanned work: {need}")
        self.rebutted = True
        self.info(f"BLOCKED_ON rejected — {rebuttal}")
        reply = await self._coder(seat, prompts.REBUTTAL.format(need=need, rebuttal=rebuttal), task, index)
        again = coder_sentinel(reply).blocked_on
        if again is not None:
            raise StoryWaiting(f"blocked on unplanned work: {again}")
        return reply
