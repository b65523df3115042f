"""Notification derivation and pacing, without processes: a fake clock and a manual scheduler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flowd.control.shapes import lane_wire
from flowd.events.model import (
    Envelope,
    Event,
    ExecutorExcluded,
    ExecutorLeased,
    ExecutorResumed,
    GateFlaky,
    MergeRevision,
    PlannedTask,
    RunStarted,
    StoryStatusChanged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
    TokensUsed,
    Usage,
)
from flowd.server.notify import Note, Pacer, notes_for, snapshot
from flowd.trace.view import RunView


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None], list[bool]]] = []

    def schedule(self, delay: float, callback: Callable[[], None]) -> Any:
        cancelled = [False]
        self.timers.append((self.now + delay, callback, cancelled))

        class Handle:
            def cancel(self) -> None:
                cancelled[0] = True

        return Handle()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [t for t in self.timers if t[0] <= self.now]
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, callback, cancelled in due:
            if not cancelled[0]:
                callback()


def pacer() -> tuple[Pacer, list[tuple[str, dict[str, Any]]], Clock]:
    sent: list[tuple[str, dict[str, Any]]] = []
    clock = Clock()
    return (
        Pacer(lambda m, p: sent.append((m, p)), clock.schedule, interval=0.1, clock=lambda: clock.now),
        sent,
        clock,
    )


def feed(view: RunView, events: list[Event]) -> list[Note]:
    notes: list[Note] = []
    for seq, event in enumerate(events, start=view.last_seq + 1):
        view.apply(Envelope(seq=seq, at="2026-01-01T00:00:00.000Z", run_id=view.run_id, event=event))
        notes += notes_for(view, event)
    return notes


def tokens(lane: str, n: int) -> TokensUsed:
    return TokensUsed(lane=lane, agent="coder", usage=Usage(input=n, output=0, total=n, cost_usd=0.01))


START = RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b"], concurrency=2)


def test_token_updates_of_one_lane_are_coalesced_later_state_wins() -> None:
    p, sent, clock = pacer()
    view = RunView(run_id="r")
    for note in feed(view, [START, StoryStatusChanged(story="a", status="active")]):
        p.offer(note)
    sent.clear()
    clock.advance(1.0)
    for n in range(1, 21):
        for note in feed(view, [tokens("a", n)]):
            p.offer(note)
    lanes = [params for method, params in sent if method == "flow/lane"]
    assert len(lanes) == 1  # the first went at once; the rest wait for the interval
    clock.advance(0.1)
    lanes = [params for method, params in sent if method == "flow/lane"]
    assert len(lanes) == 2
    assert lanes[-1]["tokens"] == sum(range(1, 21))  # the later state won
    costs = [params for method, params in sent if method == "flow/cost"]
    assert costs[-1]["tokens"] == sum(range(1, 21)) and len(costs) == 2


def test_transitions_are_never_coalesced_and_keep_their_order() -> None:
    p, sent, clock = pacer()
    view = RunView(run_id="r")
    events: list[Event] = [
        START,
        StoryStatusChanged(story="a", status="active"),
        ExecutorLeased(executor="x", clone=1, role="coder", label="a"),
        TasksPlanned(lane="a", tasks=[PlannedTask(title="one"), PlannedTask(title="two")]),
        TaskStarted(lane="a", index=1, count=2, title="one"),
        tokens("a", 5),
        TaskCompleted(lane="a", index=1, count=2, title="one"),
        TaskStarted(lane="a", index=2, count=2, title="two"),
        TaskCompleted(lane="a", index=2, count=2, title="two"),
        StoryStatusChanged(story="a", status="done"),
    ]
    for note in feed(view, events):
        p.offer(note)  # all within one instant: no time passes
    tasks = [(t["index"], t["state"]) for m, t in sent if m == "flow/task"]
    assert tasks == [
        (1, "planned"),
        (2, "planned"),
        (1, "started"),
        (1, "completed"),
        (2, "started"),
        (2, "completed"),
    ]
    statuses = [lane["status"] for m, lane in sent if m == "flow/lane" and lane["lane"] == "a"]
    assert statuses[0] == "planned" and statuses[-1] == "done" and "active" in statuses
    assert [c["state"] for m, c in sent if m == "flow/clone"] == ["leased"]
    # The last lane update carries the tokens even though the token update itself was held back.
    last_lane = [lane for m, lane in sent if m == "flow/lane" and lane["lane"] == "a"][-1]
    assert last_lane["tokens"] == 5
    clock.advance(1.0)
    assert [lane for m, lane in sent if m == "flow/lane" and lane["lane"] == "a"][-1] == last_lane


def test_flush_sends_pending_updates() -> None:
    p, sent, _ = pacer()
    view = RunView(run_id="r")
    for note in feed(view, [START, tokens("a", 1), tokens("a", 2)]):
        p.offer(note)
    before = len(sent)
    p.flush()
    assert len(sent) == before + 2  # the held lane and cost updates
    assert sent[-1][1]["tokens"] == 3


def test_snapshot_describes_the_whole_run() -> None:
    view = RunView(run_id="r")
    feed(
        view,
        [
            START,
            ExecutorLeased(executor="x", clone=2, role="coder", label="a"),
            TasksPlanned(lane="a", tasks=[PlannedTask(title="one")]),
            TaskStarted(lane="a", index=1, count=1, title="one"),
        ],
    )
    notes = snapshot(view)
    methods = [n.method for n in notes]
    assert methods[0] == "flow/run" and methods[-1] == "flow/cost"
    assert methods.count("flow/lane") == 2 and methods.count("flow/task") == 1
    (clone,) = [n.params for n in notes if n.method == "flow/clone"]
    assert clone == {
        "runId": "r",
        "executor": "x",
        "clone": 2,
        "role": "coder",
        "label": "a",
        "state": "leased",
    }
    assert all(n.transition for n in notes)


def test_exclusions_are_clone_notifications_with_every_contract_field() -> None:
    view = RunView(run_id="r")
    notes = feed(
        view,
        [
            ExecutorExcluded(
                executor="claude", reason="usage limit reached", until="2026-11-29T20:00:00.000Z"
            ),
            ExecutorResumed(executor="claude", reason="the limit has reset"),
        ],
    )
    clones = [n.params for n in notes if n.method == "flow/clone"]
    assert clones == [
        {
            "runId": "r",
            "executor": "claude",
            "role": "all",
            "state": "excluded",
            "reason": "usage limit reached",
            "until": "2026-11-29T20:00:00.000Z",
        },
        {
            "runId": "r",
            "executor": "claude",
            "role": "all",
            "state": "resumed",
            "reason": "the limit has reset",
        },
    ]


def test_a_flaky_gate_and_a_merge_revision_send_the_lane_at_once() -> None:
    p, sent, _ = pacer()
    view = RunView(run_id="r")
    for note in feed(view, [START, StoryStatusChanged(story="a", status="active"), tokens("a", 1)]):
        p.offer(note)
    sent.clear()
    # Within the pacing interval of the last lane update: only a changed signature goes out now.
    for note in feed(view, [GateFlaky(lane="a", where="task", gate="pytest", attempts=1)]):
        p.offer(note)
    for note in feed(view, [MergeRevision(lane="a", round=1, gate="pytest", output="1 failed")]):
        p.offer(note)
    lanes = [params for method, params in sent if method == "flow/lane"]
    assert [(lane.get("flaky"), lane.get("mergeRevision")) for lane in lanes] == [(1, None), (1, 1)]
    assert feed(view, [GateFlaky(where="epic", gate="pytest", attempts=2)]) == []  # no lane: nothing
    assert "flaky" not in lane_wire(view, view.lanes["b"]) and view.flaky_gates[-1].lane is None


def test_a_lane_escape_is_an_attention_naming_the_path() -> None:
    from flowd.events.model import LaneEscape

    view = RunView(run_id="r")
    escape = LaneEscape(lane="b", path="/repo/.flow/config.toml", what="flowState", action="undone")
    (note,) = feed(view, [START, escape])[-1:]
    assert note.transition and note.params == {
        "runId": "r", "lane": "b", "reason": "escaped", "actions": [],
        "message": "story 'b' wrote past its lane: /repo/.flow/config.toml (flowState); it was put back",
        "paths": ["/repo/.flow/config.toml"],
    }  # fmt: skip
