"""View checkpoints (`flowd.trace.checkpoint`): folding from a checkpoint and then the trace's tail
gives exactly the full fold, wherever the checkpoint was cut; a checkpoint that does not check out
is ignored."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flowd.base import jsonl
from flowd.control.shapes import status_wire
from flowd.cost.prices import pricer
from flowd.events.model import Info, TaskCompleted, TaskStarted
from flowd.store.config import PriceOverride, Settings
from flowd.trace.checkpoint import (
    ENV_BYTES,
    FILE_NAME,
    capture,
    checkpoint_path,
    pricing_key,
    save,
    with_pricing_key,
)
from flowd.trace.fastfold import fold_lines
from flowd.trace.log import TraceFollower, TraceWriter, fold_trace
from flowd.trace.view import (
    BatchView,
    CloneView,
    FlakyGate,
    LaneView,
    PauseView,
    PhaseSpan,
    RunTotals,
    RunView,
    TaskView,
    UsageLike,
    reported_cost,
)
from tests.test_trace_fold import RUN, line, odd_lines, one_of_each


def price(model: str | None, usage: UsageLike) -> float | None:
    if usage.cost_usd is not None:
        return usage.cost_usd
    return None if model == "z" else 0.001 * usage.input + 0.002 * usage.output + 0.0003


with_pricing_key(price, "test prices 1")


def other_price(model: str | None, usage: UsageLike) -> float | None:
    return 1.0


with_pricing_key(other_price, "test prices 2")


def trace_lines() -> list[bytes]:
    """Every event type, odd lines (coerced, rejected, torn, not JSON), long writer-format runs."""
    events = one_of_each()
    lines = [line(n, e) for n, e in enumerate(events, 1)]
    lines[20:20] = odd_lines(100)
    lines += [line(200 + n, e) for n, e in enumerate(events[1:-1] * 3)]
    return lines


def write(path: Path, lines: list[bytes]) -> bytes:
    data = b"".join(x + b"\n" for x in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def full_fold(path: Path, pricer_: Any = price) -> RunView:
    """The fold of the whole trace, with no checkpoint to start from."""
    ckpt = checkpoint_path(path)
    aside = ckpt.with_name("aside.json")
    if ckpt.exists():
        ckpt.rename(aside)
    try:
        assert not TraceFollower(path).restore(RunView(run_id=RUN, pricer=pricer_))
        return fold_trace(path, RunView(run_id=RUN, pricer=pricer_))
    finally:
        if aside.exists():
            aside.rename(ckpt)


def checkpoint_at(path: Path, data: bytes, offset: int, pricer_: Any = price) -> bytes | None:
    """The checkpoint a writer would have taken after the trace's first `offset` bytes, saved."""
    view = RunView(run_id=RUN, pricer=pricer_)
    fold_lines(view, data[:offset])
    last = data[data.rfind(b"\n", 0, offset - 1) + 1 : offset]
    captured = capture(view, offset, last)
    if captured is not None:
        assert save(path, captured)
    return captured


def restored_offset(path: Path, pricer_: Any = price) -> int:
    follower = TraceFollower(path)
    follower.restore(RunView(run_id=RUN, pricer=pricer_))
    return follower.offset


def test_a_fold_from_a_checkpoint_at_any_line_equals_the_full_fold(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    full = full_fold(path)
    assert full.totals.requests > 10 and full.pauses and full.clones and full.flaky_gates
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    used = 0
    for offset in ends:
        if checkpoint_at(path, data, offset) is None:
            continue  # nothing folded yet (the first lines are odd ones): no checkpoint
        assert restored_offset(path) == offset
        view = fold_trace(path, RunView(run_id=RUN, pricer=price))
        assert view == full, offset
        assert status_wire(view) == status_wire(full)
        used += 1
    assert used >= len(ends) - 1


def test_the_writers_checkpoints_all_give_the_full_fold(tmp_path: Path) -> None:
    path = tmp_path / "run" / "trace.jsonl"
    writer = TraceWriter(path, RUN)
    view = RunView(run_id=RUN, pricer=price)
    writer.fold_into(view, checkpoint_every=1)
    taken: list[bytes] = []
    assert writer.checkpoints is not None
    writer.checkpoints.written = lambda offset: taken.append(checkpoint_path(path).read_bytes())
    for event in one_of_each() * 2:
        writer.emit(event)
    writer.close()
    full = full_fold(path)
    assert view == full  # the runner's own view is what every reader folds
    assert len(taken) == 2 * len(one_of_each())
    assert restored_offset(path) == path.stat().st_size  # the last one, at close, covers it all
    for data in taken:
        checkpoint_path(path).write_bytes(data)
        assert 0 < restored_offset(path) <= path.stat().st_size
        assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full


def test_a_resumed_run_continues_from_a_checkpoint_after_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "run" / "trace.jsonl"
    events = one_of_each()
    first = TraceWriter(path, RUN)
    first.fold_into(RunView(run_id=RUN, pricer=price), checkpoint_every=1500)
    for event in events[:25]:
        first.emit(event)
    first.checkpoints = None  # killed: no checkpoint at close, and a line torn mid-write
    first.close()
    saved = restored_offset(path)
    assert 0 < saved < path.stat().st_size
    with path.open("ab") as handle:
        handle.write(line(26, events[25])[:40])

    again = TraceWriter(path, RUN)  # as the runner resumes a run: fold, then go on writing
    view = fold_trace(path, RunView(run_id=RUN, pricer=price))
    again.fold_into(view, checkpoint_every=1500)
    for event in events[25:]:
        again.emit(event)
    again.close()
    full = full_fold(path)
    assert view == full and view.last_seq == len(events)  # the seq went on where the first stopped
    assert restored_offset(path) == path.stat().st_size
    assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full


def test_a_torn_last_line_after_the_checkpoint_waits_or_is_skipped_as_without_one(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    checkpoint_at(path, data, len(data))
    torn = line(900, TaskCompleted(lane="a", index=2, count=2, title="two"))
    with path.open("ab") as handle:
        handle.write(torn[:50])
    assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full_fold(path)

    follower = TraceFollower(path)
    view = RunView(run_id=RUN, pricer=price)
    assert follower.restore(view)
    follower.fold_into(view)  # a live reader waits for the newline
    with path.open("ab") as handle:
        handle.write(torn[50:] + b"\n")
    for envelope in follower.events():
        view.apply(envelope)
    assert view == full_fold(path) and view.lanes["a"].tasks[1].state == "completed"


def test_following_goes_on_from_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines()[:30])
    checkpoint_at(path, data, len(data))
    follower = TraceFollower(path)
    view = RunView(run_id=RUN, pricer=price)
    assert follower.restore(view) and follower.offset == len(data)
    follower.fold_into(view)
    with path.open("ab") as handle:
        handle.write(line(500, TaskStarted(lane="b", index=1, count=1, title="late")) + b"\n")
    (event,) = follower.events()
    view.apply(event)
    assert view == full_fold(path) and view.lanes["b"].tasks[0].title == "late"


def _header(path: Path, **changes: Any) -> None:
    ckpt = checkpoint_path(path)
    head, body = ckpt.read_bytes().split(b"\n", 1)
    ckpt.write_bytes(jsonl.dumps(jsonl.loads(head) | changes) + b"\n" + body)


def _body(path: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    """Change the view's data and make its digest match again (only the data's own checks left)."""
    ckpt = checkpoint_path(path)
    head, body = ckpt.read_bytes().split(b"\n", 1)
    state = jsonl.loads(body)
    change(state)
    body = jsonl.dumps(state)
    header = jsonl.loads(head) | {"viewSha256": hashlib.sha256(body).hexdigest()}
    ckpt.write_bytes(jsonl.dumps(header) + b"\n" + body + b"\n")


def _rewrite_trace(path: Path, offset: int) -> None:
    """The line the checkpoint ends on, changed in place (same length)."""
    data = bytearray(path.read_bytes())
    at = data.rfind(b'"at":"', 0, offset) + len(b'"at":"2026-11-30T09:')
    data[at : at + 2] = b"59" if data[at : at + 2] != b"59" else b"58"
    path.write_bytes(bytes(data))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state[key] = value

    return change


def _first_lane(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        next(iter(state["lanes"].values()))[key] = value

    return change


STALE: dict[str, Callable[[Path, int], Any]] = {
    "no checkpoint": lambda p, o: checkpoint_path(p).unlink(),
    "another format": lambda p, o: _header(p, v=2),
    "another fold's code": lambda p, o: _header(p, fold="0" * 32),
    "another run": lambda p, o: _header(p, runId="other"),
    "a seq that is not the view's": lambda p, o: _header(p, seq=3),
    "an offset inside a line": lambda p, o: _header(p, lineStart=o - 7),
    "a trace cut short": lambda p, o: p.write_bytes(p.read_bytes()[: o - 3]),
    "a trace rewritten": lambda p, o: _rewrite_trace(p, o),
    "a torn file": lambda p, o: checkpoint_path(p).write_bytes(checkpoint_path(p).read_bytes()[:-40]),
    "a changed byte": lambda p, o: checkpoint_path(p).write_bytes(
        checkpoint_path(p).read_bytes().replace(b'"tokens":', b'"tokens":9', 1)
    ),
    "not JSON": lambda p, o: checkpoint_path(p).write_bytes(b"\x00garbage\n{}\n"),
    "empty": lambda p, o: checkpoint_path(p).write_bytes(b""),
    "a directory": lambda p, o: (checkpoint_path(p).unlink(), checkpoint_path(p).mkdir()),
    "a field missing": lambda p, o: _body(p, lambda s: s.pop("lanes")),
    "a field too many": lambda p, o: _body(p, _set("extra", 1)),
    "text for a number": lambda p, o: _body(p, _first_lane("tokens", "9")),
    "a bool for a number": lambda p, o: _body(p, _first_lane("tokens", True)),
    "a lane that is no object": lambda p, o: _body(p, _set("lanes", {"a": 5})),
    "totals as a list": lambda p, o: _body(p, _set("totals", [1])),
    "a pause keyed by a number": lambda p, o: _body(p, _set("pauses", [[5, {}]])),
    "a list of the wrong items": lambda p, o: _body(p, _set("pause_on", [1])),
}


@pytest.mark.parametrize("case", sorted(STALE))
def test_a_checkpoint_that_does_not_check_out_is_ignored(tmp_path: Path, case: str) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    offset = [i + 1 for i, b in enumerate(data) if b == ord("\n")][-10]
    assert checkpoint_at(path, data, offset) is not None and restored_offset(path) == offset
    STALE[case](path, offset)
    view = RunView(run_id=RUN, pricer=price)
    assert not TraceFollower(path).restore(view)
    assert view == RunView(run_id=RUN, pricer=price)  # left as it was
    if checkpoint_path(path).is_dir():
        checkpoint_path(path).rmdir()
    assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full_fold(path)


def test_other_prices_or_undescribed_ones_fold_the_whole_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    checkpoint_at(path, data, len(data))
    for other in (other_price, reported_cost, lambda model, usage: 2.0):
        assert restored_offset(path, other) == 0
        assert fold_trace(path, RunView(run_id=RUN, pricer=other)) == full_fold(path, other)
    unkeyed = RunView(run_id=RUN, pricer=lambda model, usage: None)
    assert capture(unkeyed, len(data), data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]) is None


def test_a_view_that_is_not_empty_takes_no_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    checkpoint_at(path, data, len(data))
    view = RunView(run_id=RUN, pricer=price)
    view.apply_event(Info(message="x"))
    view.started_at = "2026-11-30T08:00:00.000Z"
    assert not TraceFollower(path).restore(view)


def test_the_pricing_key_follows_the_price_data_and_overrides() -> None:
    assert pricing_key(reported_cost) == "reported"
    assert pricing_key(lambda model, usage: None) is None
    plain, again = pricing_key(pricer(None)), pricing_key(pricer(Settings()))
    assert plain is not None and plain.startswith("genai-prices ") and plain == again
    overridden = Settings(prices={"m": PriceOverride(input=1.0, output=2.0)})
    assert pricing_key(pricer(overridden)) not in (plain, None)
    assert pricing_key(pricer(overridden)) == pricing_key(pricer(overridden))


def test_the_state_round_trips_every_field(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    view = full_fold(path)
    checkpoint_at(path, data, len(data))
    restored = RunView(run_id=RUN, pricer=price)
    TraceFollower(path).restore(restored)
    assert restored == view
    assert None in restored.pauses and restored.exclusions == {}  # the run's own pause, keyed None


# The fields a checkpoint carries. A new field of the fold must be looked at in
# flowd/trace/checkpoint.py (a type msgspec decodes, JSON object keys) before it is added here.
FIELDS = {
    RunView: "run_id epic_id epic_branch plan status started_at ended_at concurrency reason budget_usd "
    "budget_exceeded lanes clones exclusions totals flaky_gates batches pauses pause_on raised_usd "
    "lane_raised_usd depends last_seq pricer",
    LaneView: "lane title status reason executor clone current tasks tokens cost_usd estimated "
    "task_count flaky merge_revision node port ports started_at ended_at merged_at phases batch",
    TaskView: "index title state satisfies parallel executor clone",
    CloneView: "executor clone role label held borrowed",
    PauseView: "reason question options",
    RunTotals: "tokens cost_usd estimated_tokens unpriced_tokens requests",
    FlakyGate: "lane where gate attempts",
    PhaseSpan: "phase start end",
    BatchView: "batch lanes base ok duration_ms bisections culprits",
}


@pytest.mark.parametrize("cls", list(FIELDS), ids=lambda c: c.__name__)
def test_the_checkpointed_fields_are_pinned(cls: type) -> None:
    assert [f.name for f in dataclasses.fields(cls)] == FIELDS[cls].split()


def test_the_file_sits_next_to_the_trace(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r1" / "trace.jsonl"
    assert checkpoint_path(path) == tmp_path / "runs" / "r1" / FILE_NAME
    writer = TraceWriter(path, RUN)
    writer.fold_into(RunView(run_id=RUN, pricer=price))
    writer.emit(Info(message="one"))
    assert not checkpoint_path(path).exists()  # 4 MB apart, and at close
    writer.close()
    assert restored_offset(path) == path.stat().st_size
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(["trace.jsonl", FILE_NAME])  # no temp


def test_a_reader_that_folded_a_long_trace_leaves_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_BYTES, "500")
    path = tmp_path / "trace.jsonl"
    data = write(path, trace_lines())
    full = fold_trace(path, RunView(run_id=RUN, pricer=price))  # none yet: the whole trace
    assert restored_offset(path) == len(data)  # … and one left for the next reader
    assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full == full_fold(path)

    checkpoint_path(path).unlink()  # a live follower leaves one at its last whole line
    torn = line(900, TaskCompleted(lane="a", index=2, count=2, title="two"))[:50]
    with path.open("ab") as handle:
        handle.write(torn)
    follower = TraceFollower(path)
    view = RunView(run_id=RUN, pricer=price)
    assert not follower.restore(view)
    follower.fold_into(view)
    assert follower.checkpoint(view) and restored_offset(path) == len(data)

    checkpoint_path(path).unlink()  # a one-shot reader folded the torn line: it leaves none
    assert fold_trace(path, RunView(run_id=RUN, pricer=price)) == full_fold(path)
    assert not checkpoint_path(path).exists()


def test_a_short_trace_gets_no_checkpoint_from_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write(path, trace_lines())
    fold_trace(path, RunView(run_id=RUN, pricer=price))
    assert not checkpoint_path(path).exists()  # under 4 MB: folding it all is cheap enough


def test_a_view_json_cannot_hold_is_not_checkpointed_and_the_run_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "run" / "trace.jsonl"
    writer = TraceWriter(path, RUN)
    view = RunView(run_id=RUN, pricer=price)
    writer.fold_into(view, checkpoint_every=1)
    writer.emit(one_of_each()[0])
    assert restored_offset(path) == path.stat().st_size
    view.epic_id = "\ud800"  # a lone surrogate: no UTF-8 holds it
    writer.emit(Info(message="still written"))
    writer.close()
    assert restored_offset(path) < path.stat().st_size  # the older checkpoint stays
    assert b"still written" in path.read_bytes()


def test_an_integer_past_64_bits_is_checkpointed_exactly(tmp_path: Path) -> None:
    path = tmp_path / "run" / "trace.jsonl"
    writer = TraceWriter(path, RUN)
    view = RunView(run_id=RUN, pricer=price)
    writer.fold_into(view, checkpoint_every=1)
    writer.emit(one_of_each()[0])
    view.totals.tokens = 2**70  # JSON integers are read and written exactly, of any size
    writer.emit(Info(message="after"))
    writer.close()
    restored = RunView(run_id=RUN, pricer=price)
    assert restored_offset(path) == path.stat().st_size and TraceFollower(path).restore(restored)
    assert restored.totals.tokens == 2**70
