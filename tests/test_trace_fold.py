"""The streaming fold (`flowd.trace.log.fold_lines`) against the per-line pydantic fold it replaces."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from flowd.base import jsonl
from flowd.control.shapes import status_wire
from flowd.events.model import (
    EVENT_CLASSES,
    AssistantMessage,
    BudgetExceeded,
    Envelope,
    Event,
    ExecutorExcluded,
    ExecutorHandedOver,
    ExecutorLeased,
    ExecutorReleased,
    ExecutorResumed,
    GateFlaky,
    GateResult,
    Info,
    JudgeIssue,
    LaneEscape,
    LanePlaced,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRevision,
    MergeRolledBack,
    PerimeterPath,
    PerimeterViolation,
    PlannedTask,
    RevisionRequested,
    RunEnded,
    RunStarted,
    StageCompleted,
    StageFailed,
    StageStarted,
    StoryAnswered,
    StoryJudged,
    StoryMerged,
    StoryPaused,
    StoryStatusChanged,
    TaskCompleted,
    TaskOwnsViolation,
    TasksPlanned,
    TaskStarted,
    TokensUsed,
    ToolUse,
    Usage,
    WorktreePrepared,
    dump_envelope,
    parse_line,
)
from flowd.trace import fastfold
from flowd.trace.log import TraceFollower, fold_trace, read_trace
from flowd.trace.usage import UsageLike, reported_cost
from flowd.trace.view import FOLDED_TYPES, RunView, fold

RUN = "r1"
FOLDED_TYPES_BYTES = {t.encode() for t in FOLDED_TYPES}


def one_of_each() -> list[Event]:
    """An event of every type, in an order that makes each of them matter to a fold."""
    return [
        RunStarted(
            epic_id="e", epic_branch="epic/e", plan="p.json", stories=["a", "b"], concurrency=2,
            titles={"a": "Story A"}, budget_usd=3.0,
        ),
        StoryStatusChanged(story="a", status="active"),
        ExecutorLeased(executor="x", clone=1, role="coder", label="a"),
        StageStarted(stage="plan", lane="a"),
        TasksPlanned(lane="a", tasks=[PlannedTask(title="one"), PlannedTask(title="two", completed=True)]),
        StageCompleted(stage="plan", lane="a"),
        TaskStarted(lane="a", index=1, count=2, title="one", executor="x", clone=1),
        ToolUse(lane="a", executor="x", tool="edit", args={"event": {"type": "TokensUsed", "usage": {}}}),
        AssistantMessage(lane="a", agent="coder", text='said "TokensUsed" and "event":{"type":"RunEnded"}'),
        TokensUsed(lane="a", executor="x", clone=1, agent="coder", model="m", usage=Usage(input=100, output=9, total=109)),
        TokensUsed(agent="judge", model="z", usage=Usage(input=7, output=1, cached_read=3, cost_usd=0.25), estimated=True),
        GateResult(lane="a", where="task", gate="pytest", ok=True, exit_code=0, duration_ms=5),
        PerimeterViolation(lane="a", paths=[PerimeterPath(path="x.py", kind="outside")], action="flagged"),
        TaskOwnsViolation(lane="a", task="one", paths=["y.py"]),
        ExecutorHandedOver.model_validate({"from": "x", "to": "y", "role": "coder", "label": "a", "reason": "limit"}),
        ExecutorExcluded(executor="x", reason="rate limit", until="2026-11-30T10:00:00.000Z"),
        TaskCompleted(lane="a", index=1, count=2, title="one"),
        StageFailed(stage="gates", lane="b", error="red"),
        StoryJudged(lane="a", round=1, clean=False, issues=[JudgeIssue(severity="minor", title="t")]),
        MergeRolledBack(lane="b", reason="red"),
        StoryMerged(lane="a", branch="story/e/a", commit="c" * 40),
        ExecutorReleased(executor="x", clone=1, role="coder", label="a"),
        ExecutorResumed(executor="x", reason="over"),
        BudgetExceeded(scope="epic", limit_usd=3.0, spent_usd=3.5),
        GateFlaky(lane="a", where="task", gate="pytest", attempts=1),
        WorktreePrepared(lane="a", copied=[".env"], port=41000, ports="41000-41009"),
        MergeRevision(lane="b", round=1, gate="pytest", output="red"),
        StoryPaused(lane="b", reason="blocked", question="what?", options=["stop"]),
        StoryPaused(reason="budget", question="raise?", options=["raise 5", "stop"]),
        StoryAnswered(lane="b", answer="use x.py", by="cli"),
        RevisionRequested(lane="a", path="a.py", line=3, text="rename it", by="cli", id="r1", quote="x = 1"),
        LanePlaced(lane="a", engine="ray", node="host/1a2b3c4d"),
        StageStarted(stage="story b: merge", lane="b"),
        MergeBatchStarted(batch=1, lanes=["b"], base="d" * 40),
        MergeBatchResult(batch=1, ok=False, duration_ms=12),
        MergeBisect(batch=1, lanes=["b"], culprit="b"),
        LaneEscape(lane="a", path="/repo/.git/config", what="gitConfig", action="undone"),
        Info(lane="a", message="note"),
        StoryStatusChanged(story="a", status="done"),
        RunEnded(outcome="done", done=1, failed=0, skipped=1, reason="ok"),
    ]  # fmt: skip


def line(number: int, event: Event | dict[str, Any], *, spaced: bool = False, **header: Any) -> bytes:
    seq = number
    if isinstance(event, dict):
        raw: dict[str, Any] = {
            "v": 1,
            "seq": seq,
            "at": f"2026-11-30T09:00:{seq % 60:02d}.000Z",
            "runId": RUN,
        }
        raw |= {"event": event, **header}
    else:
        at = f"2026-11-30T09:00:{seq % 60:02d}.000Z"
        raw = jsonl.loads(dump_envelope(Envelope(seq=seq, at=at, run_id=RUN, event=event))) | header
    return (json.dumps(raw) if spaced else jsonl.dumps(raw).decode()).encode()


def odd_lines(start: int) -> list[bytes]:
    """Lines a tolerant reader must treat exactly as pydantic does: coerced, rejected or skipped."""
    used = {"type": "TokensUsed", "lane": "b", "agent": "coder", "model": "m"}
    return [
        line(start, {**used, "usage": {"input": 5, "output": 1, "costUsd": 1}}),  # int cost → float
        line(start + 1, {**used, "usage": {"input": "6", "output": 1}}),  # a string count, coerced
        line(start + 2, {**used, "usage": {"input": 7, "output": 1, "cached_read": 2}}),  # snake_case
        line(start + 3, {"type": "TokensUsed", "lane": "b", "usage": {"input": 1}}),  # no agent: rejected
        line(start + 4, {**used, "clone": "1", "usage": {"input": 8}}),  # clone as text, coerced
        line(start + 5, {**used, "estimated": 1, "usage": {"input": 9}}),  # 1 as a bool
        line(start + 6, {**used, "usage": {"input": 10}}, spaced=True),  # another writer's spacing
        line(start + 7, {"type": "StoryStatusChanged", "story": "b", "status": "bogus"}),  # rejected
        line(start + 8, {"type": "StoryStatusChanged", "story": "b", "status": "failed"}, v=2),  # v 2
        line(start + 9, {"type": "TaskStarted", "lane": "b", "index": 1, "count": 1, "title": "t"}, seq="x"),
        line(start + 10, {"type": "Future", "lane": "b"}),  # an unknown type
        line(start + 11, {**used, "usage": {"input": 11}}, runId=5),  # a bad run id
        line(
            start + 12,
            {"type": "ExecutorLeased", "executor": "x", "clone": "2", "role": "judge", "label": "b"},
        ),
        line(
            start + 13,
            {"type": "ExecutorReleased", "executor": "x", "clone": 2, "role": "judge", "borrowed": 0},
        ),
        line(
            start + 14, {"type": "ExecutorLeased", "executor": "y", "role": "coder", "label": "b", "extra": 1}
        ),
        line(start + 15, {"type": "ExecutorReleased", "executor": 5, "role": "coder", "label": "b"}),
        line(start + 16, {**used, "usage": {"input": 7, "output": 1}}).replace(
            b'"input":7',
            b'"input":%d' % (1 << 63),  # past 63 bits
        ),
        line(start + 17, {**used, "usage": {"input": 12, "output": 1}}, v=2),  # a usage line of v 2
        line(start + 18, {"type": "ExecutorLeased", "executor": "y", "role": "coder", "label": "b"}, v=2),
        line(start + 19, {**used, "usage": {"input": 13, "output": True}}),  # a bool as a count
        *odd_gate_lines(start + 20),
        b"not json",
        b"",
        b"[1, 2]",
        b'{"v":1,"seq":999,"at":"x","runId":"r1","event":{"type":"TokensUsed","lane":"b"',  # torn by a kill
    ]


def odd_gate_lines(start: int) -> list[bytes]:
    """Gate results the typed decoder refuses, for pydantic to coerce, reject or take; lane b codes
    first, so that each one taken moves its phases."""
    gate = {"type": "GateResult", "lane": "b", "where": "task", "gate": "pytest", "ok": True}
    timed = {**gate, "exitCode": 0}
    odd: list[dict[str, Any]] = [
        {**gate, "exitCode": "1", "durationMs": 1000},  # a string code, coerced
        {**timed, "ok": 1, "durationMs": 1000},  # 1 as a bool
        {**timed, "durationMs": 2000.0},  # a whole float as an int
        {**gate, "exit_code": 0, "duration_ms": 3000},  # snake_case
        {**timed, "durationMs": 1000, "extra": 1},  # an unknown key, ignored
        {**timed, "gate": None, "durationMs": 1000},  # no gate: rejected
        {**timed, "where": "bogus", "durationMs": 1000},  # rejected
        {**timed, "durationMs": 10**14},  # a start no clock holds
        {**timed, "durationMs": 1 << 63},  # past 63 bits
        {**timed, "lane": None, "durationMs": 1000},  # no lane: no phase
    ]
    started = {"type": "TaskStarted", "lane": "b", "index": 1, "count": 1, "title": "t"}
    return [line(start, started), *(line(start + 1 + n, e) for n, e in enumerate(odd))]


def reference(lines: list[bytes], pricer: Any) -> RunView:
    """The fold as it was: every line validated into pydantic objects, then applied."""
    return fold(RUN, [e for e in (parse_line(x) for x in lines) if e is not None], pricer=pricer)


def price(model: str | None, usage: UsageLike) -> float | None:
    if usage.cost_usd is not None:
        return usage.cost_usd
    return (
        None
        if model == "z"
        else 0.001 * usage.input + 0.002 * usage.output + 0.0001 * (usage.cached_read or 0)
    )


def state(view: RunView) -> dict[str, Any]:
    return {
        "wire": status_wire(view),
        "lanes": copy.deepcopy(view.lanes),
        "clones": copy.deepcopy(view.clones),
        "pauses": copy.deepcopy(view.pauses),
        "raised": (view.raised_usd, dict(view.lane_raised_usd)),
    }


def write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(x + b"\n" for x in lines))


@pytest.mark.parametrize("chunk_bytes", [1, 97, 4096, 1 << 20])
def test_streaming_fold_equals_the_pydantic_fold(tmp_path: Path, chunk_bytes: int) -> None:
    events = one_of_each()
    lines = [line(n, e) for n, e in enumerate(events, 1)]
    lines[20:20] = odd_lines(100)
    # Long runs of writer-format lines (the fast path) with odd lines between them (the slow one).
    lines += [line(200 + n, e) for n, e in enumerate(events[1:-1] * 30)]
    lines += odd_lines(2000)
    path = tmp_path / "trace.jsonl"
    write(path, lines)
    follower = TraceFollower(path, chunk_bytes=chunk_bytes)
    view = RunView(run_id=RUN, pricer=price)
    follower.fold_into(view)
    assert state(view) == state(reference(lines, price))
    assert view.totals.requests > 60 and view.lanes["b"].tokens > 0  # the odd lines were folded too


def test_the_first_line_sets_the_start_whatever_its_type(tmp_path: Path) -> None:
    lines = [line(1, Info(message="first")), *(line(n, e) for n, e in enumerate(one_of_each(), 2))]
    path = tmp_path / "trace.jsonl"
    write(path, lines)
    view = fold_trace(path, RunView(run_id=RUN))
    assert view.started_at == "2026-11-30T09:00:01.000Z"
    assert state(view) == state(reference(lines, reported_cost))


def test_types_outside_folded_types_never_change_a_view() -> None:
    events = one_of_each()
    assert {e.type for e in events} == set(EVENT_CLASSES)  # the sample covers every type
    view = fold(RUN, [Envelope(seq=n, at="t", run_id=RUN, event=e) for n, e in enumerate(events[:-1], 1)])
    skipped = [e for e in events if e.type not in FOLDED_TYPES]
    assert len(skipped) == 11
    for event in skipped:
        before = state(view)
        view.apply_event(event, "2026-11-30T10:00:00.000Z")
        assert state(view) == before, event.type


def test_follower_folds_then_follows_new_lines_and_resumes_a_torn_one(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    events = one_of_each()
    write(path, [line(n, e) for n, e in enumerate(events[:10], 1)])
    follower = TraceFollower(path, chunk_bytes=64)
    view = RunView(run_id=RUN)
    follower.fold_into(view)
    assert view.lanes["a"].tasks[0].state == "started"
    tail = line(11, events[16])  # TaskCompleted
    with path.open("ab") as handle:
        handle.write(tail[:30])
    assert follower.poll() == []
    with path.open("ab") as handle:
        handle.write(tail[30:] + b"\n")
    got = follower.poll()
    assert [e.seq for e in got] == [11]
    view.apply(got[0])
    assert view.lanes["a"].tasks[0].state == "completed"


def test_an_over_long_line_is_dropped_and_reading_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    huge = line(2, AssistantMessage(agent="coder", text="x" * 5000))
    write(path, [line(1, Info(message="a")), huge, line(3, Info(message="b"))])
    follower = TraceFollower(path, chunk_bytes=256, max_line_bytes=1024)
    assert [e.seq for e in follower.events()] == [1, 3]
    assert follower.offset == path.stat().st_size


def test_one_shot_readers_take_a_last_line_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    events = one_of_each()
    path.write_bytes(line(1, events[0]) + b"\n" + line(2, events[-1]))  # RunEnded, unterminated
    assert [e.seq for e in TraceFollower(path).events()] == [1]  # a follower waits for the newline
    assert [e.seq for e in read_trace(path)] == [1, 2]
    assert fold_trace(path, RunView(run_id=RUN)).status == "done"


@pytest.mark.parametrize(
    ("words", "taken", "refused"),
    [
        ({b"ab", b"a", b"abc", b"b"}, [b"a", b"ab", b"abc", b"b"], [b"", b"ac", b"abcd", b"ba"]),
        (
            {b"TokensUsed", b"TaskStarted"},
            [b"TokensUsed", b"TaskStarted"],
            [b"T", b"Tokens", b"TaskStartedX"],
        ),
        (set(FOLDED_TYPES_BYTES), sorted(FOLDED_TYPES_BYTES), [b"ToolUse", b"Run", b"AssistantMessage"]),
    ],
)
def test_the_folded_types_mark_takes_exactly_its_words(
    words: set[bytes], taken: list[bytes], refused: list[bytes]
) -> None:
    pattern = re.compile(fastfold._branching(frozenset(words)))
    assert [w for w in taken if pattern.fullmatch(w)] == taken
    assert [w for w in refused if pattern.fullmatch(w)] == []
