"""`flow/attention` for stories waiting on a person (docs/protocol.md): a pause (`StoryPaused`:
reason `budget`, `blocked`, or `paused` for no executor and for a story waiting for approval to
merge, whose actions hold `approve`) and a failed story (`failed`); then once more with `cleared` when it no longer waits (answered, the failed story running again, or the run
over). A client re-attaching gets the open ones again. The notes go out at once (transitions), so
the editor hears of a pause as soon as the server's trace follower reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowd import protocol
from flowd.server.features import Feature
from flowd.server.notify import Note

if TYPE_CHECKING:
    from flowd.events.model import Envelope
    from flowd.server.app import FlowServer
    from flowd.server.runs import Tracked

ATTENTION = protocol.ATTENTION.name
# `StoryPaused.reason` → `flow/attention.reason` (docs/protocol.md: paused, blocked, failed, budget).
REASON = {"budget": "budget", "blocked": "blocked", "noExecutor": "paused", "merge": "paused"}


class Attention(Feature):
    def __init__(self, server: FlowServer) -> None:
        super().__init__(server)
        self.open: dict[str, dict[str | None, str]] = {}  # runId → lane (None: the run) → reason

    def run_attached(self, run: Tracked) -> None:
        view = run.view
        for lane, pause in view.pauses.items():
            self._raise(run.run_id, lane, REASON.get(pause.reason, "paused"), pause.question, pause.options)
        for story in view.lanes.values():
            if story.status == "failed":
                self._raise(run.run_id, story.lane, "failed", _failed(story.lane, story.reason), [])

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events.model import StoryAnswered, StoryPaused, StoryStatusChanged

        event, run_id = envelope.event, run.run_id
        if isinstance(event, StoryPaused):
            self._raise(run_id, event.lane, REASON[event.reason], event.question, event.options)
        elif isinstance(event, StoryAnswered):
            self._clear(run_id, event.lane, f"answered ({event.by}): {event.answer}")
        elif isinstance(event, StoryStatusChanged):
            if event.status == "failed":
                self._raise(run_id, event.story, "failed", _failed(event.story, event.reason), [])
            elif event.status == "active":
                self._clear(run_id, event.story, f"story {event.story} is running again")

    def run_ended(self, run: Tracked) -> None:
        # Nobody can answer a run that is over; a resumed run asks again.
        for lane in list(self.open.get(run.run_id, {})):
            self._clear(run.run_id, lane, f"run {run.run_id} ended")
        self.open.pop(run.run_id, None)

    def _raise(self, run_id: str, lane: str | None, reason: str, message: str, actions: list[str]) -> None:
        self.open.setdefault(run_id, {})[lane] = reason
        self._send(run_id, lane, reason, message, actions)

    def _clear(self, run_id: str, lane: str | None, message: str) -> None:
        if self.open.get(run_id, {}).pop(lane, None) is not None:
            self._send(run_id, lane, "cleared", message, [])

    def _send(self, run_id: str, lane: str | None, reason: str, message: str, actions: list[str]) -> None:
        from flowd.protocol.models import AttentionParams

        params = AttentionParams(run_id=run_id, lane=lane, reason=reason, message=message, actions=actions)
        self.server.pacer.offer(Note(ATTENTION, params.wire(), (ATTENTION, run_id, lane, reason), True))


def _failed(story: str, reason: str | None) -> str:
    return f"story {story} failed: {reason}" if reason else f"story {story} failed"
