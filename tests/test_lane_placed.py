"""`LanePlaced` (docs/scale-out.md) through the fold, the wire, the server's notes and the terminal."""

from __future__ import annotations

from flowd.control.progress import lane_row, plain_lines
from flowd.control.shapes import lane_wire
from flowd.events.model import Envelope, LanePlaced, RunStarted
from flowd.server.notify import notes_for
from flowd.trace.view import RunView


def _view() -> tuple[RunView, Envelope]:
    view = RunView(run_id="r")
    started = RunStarted(epic_id="ep", epic_branch="epic/ep", plan="p", stories=["a", "b"], concurrency=2)
    view.apply(Envelope(seq=1, at="2026-11-30T12:00:00.000Z", run_id="r", event=started))
    placed = Envelope(
        seq=2,
        at="2026-11-30T12:00:01.000Z",
        run_id="r",
        event=LanePlaced(lane="a", engine="ray", node="n1/1a2b"),
    )
    view.apply(placed)
    return view, placed


def test_the_fold_keeps_the_node_and_the_wire_and_notes_carry_it() -> None:
    view, placed = _view()
    assert view.lanes["a"].node == "n1/1a2b" and view.lanes["b"].node is None
    assert lane_wire(view, view.lanes["a"])["node"] == "n1/1a2b"
    assert "node" not in lane_wire(view, view.lanes["b"])  # local lanes: unchanged wire
    notes = notes_for(view, placed.event)
    assert [n.params["node"] for n in notes] == ["n1/1a2b"]


def test_the_terminal_shows_where_a_lane_runs() -> None:
    view, placed = _view()
    assert any("@ n1/1a2b" in str(cell) for cell in lane_row(view, view.lanes["a"]))
    assert not any("@" in str(cell) for cell in lane_row(view, view.lanes["b"]))
    assert plain_lines(view, placed)[0].endswith("a: placed on n1/1a2b (ray)")
