"""The `flow/*` notifications of each live run (built in `flowd/server/notify.py`, paced by the
server's `Pacer`), and `flow/status`, `flow/graph` and `flow/timeline`, the same fold on request
(docs/protocol.md, docs/graph.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowd import protocol
from flowd.server.features import Feature
from flowd.server.notify import cost_note, notes_for, run_note, snapshot

if TYPE_CHECKING:
    from flowd.control.shapes import Places
    from flowd.events.model import Envelope
    from flowd.server.notify import Note
    from flowd.server.runs import Tracked
    from flowd.trace.view import RunView


def notes_for_end(view: RunView, places: Places | None = None) -> list[Note]:
    """The closing notifications of a run that ended without a RunEnded event (killed)."""
    return [cost_note(view, transition=True), run_note(view, places)]


class RunNotifications(Feature):
    def _offer(self, notes: list[Note]) -> None:
        for note in notes:
            self.server.pacer.offer(note)

    def run_attached(self, run: Tracked) -> None:
        self._offer(snapshot(run.view, self.server.places))

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events.model import RunEnded

        self._offer(notes_for(run.view, envelope.event, self.server.places))
        if isinstance(envelope.event, RunEnded):
            run.end_notified = True

    def run_ended(self, run: Tracked) -> None:
        if not run.end_notified:
            self._offer(notes_for_end(run.view, self.server.places))
        run_id = run.run_id
        self.server.pacer.forget(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] == run_id)

    def status(self) -> dict[str, Any]:
        """`flow/status`: every run followed, newest state, as `flowd status --json` shows it."""
        runs = self.server.runs
        if runs is None:
            return {"runs": []}
        from flowd.control.shapes import status_run
        from flowd.protocol import models as proto

        runs_out = [status_run(run.view, run.record.started_at, self.server.places) for run in runs.ordered()]
        return proto.StatusResult(runs=runs_out).wire()

    def graph(self, run_id: str) -> dict[str, Any]:
        """`flow/graph`: the epic graph of a run the server follows (docs/graph.md)."""
        from flowd.engine.epicgraph import graph_wire

        return graph_wire(self._view(run_id, protocol.GRAPH.name))

    def timeline(self, run_id: str) -> dict[str, Any]:
        """`flow/timeline`: each lane's phases with their times (docs/graph.md)."""
        from flowd.engine.epicgraph import timeline_wire

        return timeline_wire(self._view(run_id, protocol.TIMELINE.name))

    def _view(self, run_id: str, method: str) -> RunView:
        from flowd.server.params import invalid

        run = self.server.runs.find(run_id) if self.server.runs is not None else None
        if run is None:
            known = ", ".join(r.run_id for r in self.server.runs.ordered()) if self.server.runs else ""
            raise invalid(
                method,
                f"runId: no run '{run_id}' in this repository" + (f" (known: {known})" if known else ""),
            )
        return run.view
