"""The runner's desk for requests from outside the run (docs/answers.md): answers to a pause and
review comments that become revision tasks. `flowd/store/inbox.py` carries them here from the CLI and
the editor; each kind is one method, so each feature owns its own."""

from __future__ import annotations

from dataclasses import dataclass

from flowd.engine.context import RunContext
from flowd.engine.review import take_revision
from flowd.store.inbox import Answer, Reply, Revision


@dataclass
class RequestDesk:
    ctx: RunContext

    async def handle(self, request: Answer | Revision) -> Reply:
        if isinstance(request, Answer):
            return await self.answer(request)
        return await self.revise(request)

    async def answer(self, request: Answer) -> Reply:
        if self.ctx.pauses is not None:
            return await self.ctx.pauses.answer(request)  # flowd/engine/pause_desk.py
        if request.story:
            return Reply(ok=False, message=f"Story {request.story} of run {self.ctx.run_id} is not paused.")
        return Reply(ok=False, message=f"Run {self.ctx.run_id} has nothing paused.")

    async def revise(self, request: Revision) -> Reply:
        return take_revision(self.ctx, request)
