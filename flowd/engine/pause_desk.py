"""The runner's live pauses (docs/answers.md): asking a person (`StoryPaused`), taking the answer
that comes through the inbox (`StoryAnswered`), doing what it says, and waking the scheduler.

The rules (what a pause asks, what an answer means) are engine/core/pause.py's; the scheduler
decides what a pause and an answer do to the run (engine/core/scheduler.py). This module keeps
which pauses are open in this process and carries out the answer's effect:

- `raise N`: the budget grows by N (the fold adds every raise up, so a resumed run keeps it);
- free text to a blocked story: kept in `.flow/epics/<epic>/stories/<id>.answers.md`, and the
  story's coder prompts carry it from then on (in later runs too);
- `wait`: executors excluded for the run are taken back, and the story tries again;
- `approve` to a story ready to merge: the approval is saved in its state (the tasks it covers),
  and the story, launched again, merges; any other text is appended to its checkpoint as a
  revision task, and the story, launched again, works it and asks again (engine/core/approval.py).
  A review comment on such a story sends it back the same way (`send_back`).

A killed run resumes paused: the same run (`--run-id`) finds its unanswered pauses in its own
trace; a new run of the epic (`flowd run` again, `flow.resumeEpic`) takes over the story pauses
the epic's previous run left unanswered and asks them again in its own trace. A run-level budget
pause is not taken over by a new run: its budget counts its own spending.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from flowd.base.fsio import write_text_atomic
from flowd.engine import prompts
from flowd.engine.context import RunContext
from flowd.engine.core.approval import (
    ApprovalRefused,
    Approve,
    Effect,
    effect_name,
    on_review_comment,
    read_approval,
)
from flowd.engine.core.pause import (
    PAUSE_REASONS,
    AnswerRefused,
    Decision,
    PauseReason,
    Raise,
    Stop,
    Tell,
    Wait,
    goes_on,
    question_for,
    read_answer,
)
from flowd.engine.core.scheduler import Answered, Paused
from flowd.engine.reopen import reopen_with_revision
from flowd.engine.state import EpicPaths, load_state, save_state
from flowd.events.model import AnswerEffect, StoryAnswered, StoryPaused, StoryStatusChanged
from flowd.store.inbox import Answer, By, Reply
from flowd.tasks.checkpoint import parse_checkpoint
from flowd.trace.log import fold_trace, list_runs, trace_path
from flowd.trace.usage import Pricer, reported_cost
from flowd.trace.view import PauseView, RunView


def answers_file(paths: EpicPaths, story: str) -> Path:
    return paths.answers(story)


def told(paths: EpicPaths, story: str) -> list[str]:
    """What people answered this story's BLOCKED_ON pauses, oldest first."""
    try:
        text = answers_file(paths, story).read_text(encoding="utf-8")
    except OSError:
        return []
    return [line[2:] for line in text.splitlines() if line.startswith("- ")]


def _keep_told(paths: EpicPaths, story: str, text: str) -> None:
    lines = [*told(paths, story), " ".join(text.split())]
    write_text_atomic(answers_file(paths, story), "".join(f"- {line}\n" for line in lines))


def earlier_pauses(
    repo: Path, epic_id: str, run_id: str, price: Pricer = reported_cost
) -> tuple[dict[str, PauseView], list[str] | None]:
    """The story pauses the epic's previous run left unanswered, and what it paused on. `price`:
    the run's own pricer, so that the previous run's view checkpoint (priced so) is used."""
    previous = next((r for r in list_runs(repo) if r.epic_id == epic_id and r.run_id != run_id), None)
    if previous is None:
        return {}, None
    view = fold_trace(trace_path(repo, previous.run_id), RunView(run_id=previous.run_id, pricer=price))
    return {lane: p for lane, p in view.pauses.items() if lane is not None}, view.pause_on


class PauseDesk:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.open: dict[str | None, PauseReason] = {}  # lane (None: the run) → reason
        self._answered: list[Answered] = []
        self.wake = asyncio.Event()

    def restore(self, carried: dict[str, PauseView] | None = None) -> list[Paused]:
        """The pauses a killed run left unanswered, as scheduler events: the run goes on paused.
        Its own (this trace's) are not asked again; those `carried` over from the epic's previous
        run are asked again in this trace. Only reasons this run pauses on are kept."""
        ctx = self.ctx
        events: list[Paused] = []
        own = list(ctx.view.pauses.items())
        theirs = [(lane, p) for lane, p in (carried or {}).items() if lane not in ctx.view.pauses]
        for mine, (lane, pause) in [*((True, x) for x in own), *((False, x) for x in theirs)]:
            reason = pause.reason
            if reason not in PAUSE_REASONS or reason not in ctx.pause_on:
                continue
            if lane is not None and ctx.plan.story(lane) is None:
                continue
            if not mine:
                if reason == "merge" and lane is not None:  # its lane reads `ready` in this run too
                    ctx.emit(StoryStatusChanged(story=lane, status="ready", reason="waiting for approval"))
                ctx.emit(
                    StoryPaused(lane=lane, reason=reason, question=pause.question, options=pause.options)
                )
            self.open[lane] = reason
            events.append(Paused(reason, story=lane, told=True))
        return events

    def ask(self, story: str | None, reason: str, detail: str) -> None:
        pause = cast(PauseReason, reason)
        asked = question_for(pause, story, detail)
        self.open[story] = pause
        self.ctx.emit(StoryPaused(lane=story, reason=pause, question=asked.question, options=asked.options))

    def take(self) -> list[Answered]:
        """The answers taken since the last call, for the scheduler."""
        out, self._answered = self._answered, []
        self.wake.clear()
        return out

    async def answer(self, request: Answer) -> Reply:
        ctx, key = self.ctx, request.story
        refused = self._refusal(key)
        if refused is not None:
            return Reply(ok=False, message=refused)
        reason = self.open[key]
        if reason == "merge" and key is not None:
            return self._answer_approval(key, request)
        try:
            decision = read_answer(reason, request.answer)
        except AnswerRefused as exc:
            return Reply(ok=False, message=f"{str(exc)[:1].upper()}{str(exc)[1:]}; nothing was changed.")
        # Recorded first: the fold it updates is what the budget and the coder's prompt read.
        ctx.emit(
            StoryAnswered(
                lane=key,
                answer=request.answer.strip(),
                by=request.by,
                effect=_effect(decision),
                raise_usd=decision.usd if isinstance(decision, Raise) else None,
            )
        )
        if isinstance(decision, Tell) and key is not None:
            _keep_told(ctx.paths, key, decision.text)
        if isinstance(decision, Raise):
            ctx.budget_raised(key)
        elif isinstance(decision, Wait):
            ctx.pool.readmit()
        self._close(key, goes_on(decision))
        what = "the run" if key is None else f"story {key}"
        then = "goes on" if goes_on(decision) else "stops as it would without pauseOn"
        return Reply(ok=True, message=f"Answered the {reason} pause of {what}: it {then}.")

    def _answer_approval(self, story: str, request: Answer) -> Reply:
        """`approve` or changes for the coder, to a story waiting for approval before its merge."""
        try:
            effect = read_approval(request.answer)
        except ApprovalRefused as exc:
            return Reply(ok=False, message=f"{str(exc)[:1].upper()}{str(exc)[1:]}; nothing was changed.")
        try:
            then = self._carry_out_approval(story, effect)
        except (OSError, ValueError) as exc:
            return Reply(
                ok=False, message=f"Story {story}'s files could not be updated ({exc}); nothing was changed."
            )
        self.ctx.emit(
            StoryAnswered(
                lane=story, answer=request.answer.strip(), by=request.by, effect=effect_name(effect)
            )
        )
        self._close(story, True)
        return Reply(ok=True, message=f"Answered the merge approval of story {story}: {then}.")

    def waits_for_approval(self, story: str) -> bool:
        return self.open.get(story) == "merge"

    def send_back(self, story: str, by: By, where: str) -> str:
        """A review comment (already queued) on a story waiting for approval: it goes back to its
        coder now (engine/core/approval.py, `on_review_comment`). Returns what happens, for the reply."""
        effect = effect_name(on_review_comment())
        self.ctx.emit(StoryAnswered(lane=story, answer=f"review comment on {where}", by=by, effect=effect))
        self._close(story, True)
        return f"Story {story} goes back to its coder for the revision on {where}; it asks for approval again when that is done."

    def _carry_out_approval(self, story: str, effect: Effect) -> str:
        ctx = self.ctx
        if isinstance(effect, Approve):
            state = load_state(ctx.paths, story)
            if state is None:
                raise ValueError("it has no saved state")
            checkpoint = ctx.paths.checkpoint(story)
            tasks = len(parse_checkpoint(checkpoint.read_text(encoding="utf-8"), str(checkpoint)).tasks)
            save_state(ctx.paths, state.model_copy(update={"approved": tasks}))
            return "it merges next, behind the epic gates"
        assert effect.text is not None  # comments go through `send_back`
        task = reopen_with_revision(
            ctx.paths, story, APPROVAL_SUBJECT, prompts.APPROVAL_REVISION_LEAD, effect.text
        )
        if task is None:
            raise ValueError("it has no task checkpoint")
        return f"it goes back to its coder with {task.title!r}, then asks again"

    def _close(self, key: str | None, go_on: bool) -> None:
        del self.open[key]
        self._answered.append(Answered(key, go_on))
        self.wake.set()

    def _refusal(self, key: str | None) -> str | None:
        run_id = self.ctx.run_id
        if key is not None and self.ctx.plan.story(key) is None:
            return f"Run {run_id} has no story {key!r}; `flowd status` lists its stories."
        if key in self.open:
            return None
        if not self.open:
            return f"Run {run_id} has nothing paused."
        waiting = ", ".join("the run (no --story)" if k is None else k for k in self.open)
        if key is None:
            return f"Run {run_id} itself is not paused; answer one of its paused stories with --story: {waiting}."
        return f"Story {key} of run {run_id} is not paused; paused: {waiting}."


APPROVAL_SUBJECT = "make the changes asked for before merging"


def _effect(decision: Decision) -> AnswerEffect:
    if isinstance(decision, Raise):
        return "raise"
    if isinstance(decision, Stop):
        return "stop"
    return "tell" if isinstance(decision, Tell) else "wait"
