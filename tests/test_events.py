from __future__ import annotations

import json

from flowd.events.model import (
    EVENT_TYPES,
    Envelope,
    ExecutorHandedOver,
    TokensUsed,
    Usage,
    dump_envelope,
    parse_line,
)


def test_every_contract_event_type_is_known() -> None:
    contract = {
        "RunStarted", "RunEnded", "StoryStatusChanged", "TasksPlanned", "TaskStarted", "TaskCompleted",
        "StageStarted", "StageCompleted", "StageFailed", "ToolUse", "AssistantMessage", "TokensUsed",
        "ExecutorLeased", "ExecutorReleased", "ExecutorExcluded", "ExecutorResumed", "ExecutorHandedOver",
        "GateResult", "PerimeterViolation", "TaskOwnsViolation", "StoryMerged", "MergeRolledBack",
        "StoryJudged", "BudgetExceeded", "StoryPaused", "StoryAnswered", "Info",
        "WorktreePrepared", "GateFlaky", "MergeRevision", "RevisionRequested",
        "LanePlaced", "MergeBatchStarted", "MergeBatchResult", "MergeBisect",
        "LaneEscape",
    }  # fmt: skip
    assert contract == EVENT_TYPES


def test_envelope_round_trips_in_camel_case() -> None:
    event = TokensUsed(
        lane="api",
        executor="demo",
        clone=2,
        agent="coder",
        usage=Usage(input=10, output=5, total=15, cached_read=3),
    )
    line = dump_envelope(Envelope(seq=1, at="2026-11-29T14:03:07.412Z", run_id="r1", event=event))
    raw = json.loads(line)
    assert raw == {
        "v": 1,
        "seq": 1,
        "at": "2026-11-29T14:03:07.412Z",
        "runId": "r1",
        "event": {
            "type": "TokensUsed",
            "lane": "api",
            "executor": "demo",
            "clone": 2,
            "agent": "coder",
            "usage": {"input": 10, "output": 5, "total": 15, "cachedRead": 3},
            "estimated": False,
        },
    }
    parsed = parse_line(line)
    assert parsed is not None and parsed.event == event


def test_handed_over_uses_from_on_the_wire() -> None:
    event = ExecutorHandedOver.model_validate(
        {"from": "a", "to": "b", "role": "coder", "reason": "rate limit"}
    )
    assert event.from_ == "a"
    assert event.wire()["from"] == "a"


def test_readers_skip_garbage_and_unknown_types() -> None:
    assert parse_line(b"not json") is None
    assert parse_line(b"[1, 2]") is None
    assert (
        parse_line(json.dumps({"v": 1, "seq": 1, "at": "x", "runId": "r", "event": {"type": "Future"}}))
        is None
    )
    assert (
        parse_line(json.dumps({"v": 1, "seq": 1, "at": "x", "runId": "r", "event": {"type": "Info"}})) is None
    )


def test_every_event_type_is_documented_with_its_fields() -> None:
    """docs/trace.md is the reader's list of events: every type and every field is in it."""
    import re
    from pathlib import Path

    from flowd.events import model as events

    doc = (Path(__file__).resolve().parents[1] / "docs" / "trace.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)`.*$", doc, flags=re.M)}
    for name in EVENT_TYPES:
        row = next((line for line in rows.values() if f"`{name}`" in line), None)
        assert row is not None, f"docs/trace.md does not list {name}"
        model = getattr(events, name)
        for field in model.model_fields.values():
            wire = field.alias or field.serialization_alias
            if wire and wire != "type":
                assert f"`{wire}" in row, f"docs/trace.md: {name} lacks {wire}"


def test_lane_escape_round_trips() -> None:
    from flowd.events.model import LaneEscape

    event = LaneEscape(lane="api", path="/repo/.git/hooks/post-checkout", what="gitHooks", action="undone")
    line = dump_envelope(Envelope(seq=3, at="2026-11-29T14:03:07.412Z", run_id="r1", event=event))
    assert json.loads(line)["event"] == {
        "type": "LaneEscape", "lane": "api", "path": "/repo/.git/hooks/post-checkout",
        "what": "gitHooks", "action": "undone",
    }  # fmt: skip
    parsed = parse_line(line)
    assert parsed is not None and parsed.event == event
    assert parse_line(line.replace(b'"gitHooks"', b'"nowhere"')) is None
