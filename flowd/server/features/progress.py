"""One work-done progress per run (`$/progress`, when the client supports it): begun on attach,
reported as stories finish, ended with the outcome; cancelling it cancels the run
(docs/protocol.md)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.capabilities import get_capability

from flowd.server.features import Feature

if TYPE_CHECKING:
    from flowd.events.model import Envelope
    from flowd.server.app import FlowServer
    from flowd.server.runs import Tracked
    from flowd.trace.view import RunView

log = logging.getLogger(__name__)


@dataclass
class ProgressState:
    token: str
    begun: bool = False
    ended: bool = False
    last: str | None = None


def progress_message(view: RunView) -> tuple[str, int]:
    """`<done>/<total> stories · <n> lanes` and the percentage of stories finished."""
    finished = view.count("done") + view.count("failed") + view.count("skipped")
    total = view.total
    message = f"{view.count('done')}/{total} stories · {view.active_lanes} lanes"
    return message, (finished * 100 // total) if total else 0


class WorkDoneProgress(Feature):
    def __init__(self, server: FlowServer, cancel: Callable[[str], Coroutine[Any, Any, Any]]) -> None:
        super().__init__(server)
        self._cancel = cancel
        self.states: dict[str, ProgressState] = {}

    def run_attached(self, run: Tracked) -> None:
        self.server.spawn(self._begin(run))

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events.model import RunStarted, StoryStatusChanged

        if isinstance(envelope.event, StoryStatusChanged | RunStarted):
            self._report(run)

    def run_ended(self, run: Tracked) -> None:
        self._end(run)

    def cancelled(self, token: int | str) -> None:
        """`window/workDoneProgress/cancel`: cancel the run, as `flow.cancelEpic` does."""
        for run_id, state in self.states.items():
            if state.token == token and not state.ended:
                log.info("progress cancelled by the client: cancelling run %s", run_id)
                self.server.spawn(self._cancel(run_id))

    async def _begin(self, run: Tracked) -> None:
        ls = self.server
        if not get_capability(ls.client_capabilities, "window.work_done_progress", False):
            return
        if run.run_id in self.states:
            return
        state = ProgressState(token=f"flowd-{run.run_id}-{uuid.uuid4().hex[:8]}")
        self.states[run.run_id] = state
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(state.token), 10)
        except Exception as exc:
            log.info("no progress for run %s: %s", run.run_id, exc)
            del self.states[run.run_id]
            return
        message, percentage = progress_message(run.view)
        ls.work_done_progress.begin(
            state.token,
            lsp.WorkDoneProgressBegin(
                title=f"Epic {run.epic_id}", cancellable=True, message=message, percentage=percentage
            ),
        )
        state.begun, state.last = True, message
        if run.ended:
            self._end(run)
        else:
            self._report(run)

    def _report(self, run: Tracked) -> None:
        state = self.states.get(run.run_id)
        if state is None or not state.begun or state.ended:
            return
        message, percentage = progress_message(run.view)
        if message == state.last:
            return
        state.last = message
        self.server.work_done_progress.report(
            state.token, lsp.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    def _end(self, run: Tracked) -> None:
        state = self.states.get(run.run_id)
        if state is None or not state.begun or state.ended:
            return
        self._report(run)
        state.ended = True
        view = run.view
        outcome = f"{view.status}: {view.count('done')} done, {view.count('failed')} failed, "
        outcome += f"{view.count('skipped')} skipped"
        self.server.work_done_progress.end(state.token, lsp.WorkDoneProgressEnd(message=outcome))
