"""`flow.answer`: an answer from the editor to a paused story or run, carried to the live run
through its inbox (flowd/store/inbox.py, docs/answers.md). A refusal (nothing paused there, an answer
that does not fit the pause, a run not running) is a -32602 with the run's one sentence."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowd import protocol
from flowd.base.errors import InputError
from flowd.server.features import Feature

if TYPE_CHECKING:
    from flowd.protocol.models import AnswerArgs


class Answers(Feature):
    async def answer(self, p: AnswerArgs) -> dict[str, Any]:
        from flowd.protocol.models import AnswerResult
        from flowd.server.params import invalid
        from flowd.store.inbox import Answer, post_async

        name = protocol.ANSWER.name
        runs = self.server.need_runs()
        request = Answer(story=p.story, answer=p.answer, by="editor")
        try:
            reply = await post_async(runs.repo, p.run_id, request)
        except InputError as exc:
            raise invalid(name, f"runId: {exc}")
        if not reply.ok:
            raise invalid(name, reply.message)
        return AnswerResult(run_id=p.run_id, story=p.story, message=reply.message).wire()
