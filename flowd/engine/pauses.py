"""The runner's live pauses (docs/answers.md): asking a person (`StoryPaused`), taking the answer
that comes through the inbox (`StoryAnswered`), doing what it says, and waking the scheduler.

The rules (what a pause asks, what an answer means) are engine/core/pause.py's; the scheduler
decides what a pause and an answer do to the run (engine/core/scheduler.py). This module keeps
which pauses are open in this process and carries out the answer's effect:

- `raise N`: the budget grows by N (the fold adds every raise up, so a resumed run keeps it);
- free text to a blocked story: recorded, and the story's coder prompts carry it from then on;
- `wait`: executors excluded for the run are taken back, and the story tries again.
"""

from __future__ import annotations

import asyncio
from typing import cast

from flowd.engine.context import RunContext
from flowd.engine.core.pause import (
    PAUSE_REASONS,
    AnswerRefused,
    PauseReason,
    Raise,
    Wait,
    goes_on,
    question_for,
    read_answer,
)
from flowd.engine.core.scheduler import Answered, Paused
from flowd.events import StoryAnswered, StoryPaused
from flowd.inbox import Answer, Reply


class PauseDesk:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.open: dict[str | None, PauseReason] = {}  # lane (None: the run) → reason
        self._answered: list[Answered] = []
        self.wake = asyncio.Event()

    def restore(self) -> list[Paused]:
        """The pauses a killed run left unanswered (the fold's), as scheduler events: the run goes
        on paused, without asking again."""
        events: list[Paused] = []
        for lane, pause in self.ctx.view.pauses.items():
            if pause.reason not in PAUSE_REASONS or (lane is not None and self.ctx.plan.story(lane) is None):
                continue
            self.open[lane] = pause.reason
            events.append(Paused(pause.reason, story=lane, told=True))
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
        try:
            decision = read_answer(reason, request.answer)
        except AnswerRefused as exc:
            return Reply(ok=False, message=f"{str(exc)[:1].upper()}{str(exc)[1:]}; nothing was changed.")
        # Recorded first: the fold it updates is what the budget and the coder's prompt read.
        ctx.emit(StoryAnswered(lane=key, answer=request.answer.strip(), by=request.by))
        if isinstance(decision, Raise):
            ctx.budget_raised(key)
        elif isinstance(decision, Wait):
            ctx.pool.readmit()
        del self.open[key]
        self._answered.append(Answered(key, goes_on(decision)))
        self.wake.set()
        what = "the run" if key is None else f"story {key}"
        then = "goes on" if goes_on(decision) else "stops as it would without pauseOn"
        return Reply(ok=True, message=f"Answered the {reason} pause of {what}: it {then}.")

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
