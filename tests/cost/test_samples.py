from __future__ import annotations

from pathlib import Path

from flowd.base import jsonl
from flowd.cost.samples import (
    ScanStats,
    read_samples,
    runs_dir,
    sample_from_dict,
    scan,
    trace_files,
)
from flowd.trace import log as trace
from flowd.trace.log import TraceWriter, trace_path

from .traces import started, used, write_trace

AT = "2026-10-20T10:00:00.000Z"


def line(**event: object) -> dict[str, object]:
    return {
        "v": 1,
        "seq": 1,
        "at": AT,
        "runId": "r",
        "event": {"type": "TokensUsed", "agent": "coder", **event},
    }


def test_a_written_trace_reads_back_as_samples(tmp_path: Path) -> None:
    writer = TraceWriter(trace_path(tmp_path, "r1"), "r1")
    writer.emit(started())
    writer.emit(
        used(
            input=120,
            output=30,
            cached_read=100,
            cache_write=10,
            cost=0.01,
            lane="a",
            executor="claude",
            clone=2,
        )
    )
    writer.emit(used("judge", model=None, input=4, output=1, estimated=True))
    writer.close()
    stats = ScanStats()
    samples = list(scan(trace_files(tmp_path), stats))
    assert [(s.run_id, s.agent, s.model, s.total, s.estimated) for s in samples] == [
        ("r1", "coder", "m", 150, False),
        ("r1", "judge", None, 5, True),
    ]
    first = samples[0]
    assert (first.cached_read, first.cache_write, first.cost_usd) == (100, 10, 0.01)
    assert (first.lane, first.executor, first.clone) == ("a", "claude", 2)
    assert len(first.at) == 24 and first.at.endswith("Z")
    assert stats.epics == {"r1": "auth"} and stats.skipped_lines == 0


def test_corrupt_and_odd_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    good = jsonl.dumps(line(usage={"input": 5, "output": 1}))
    torn = good[:-5]
    write_trace(
        tmp_path,
        "r1",
        [(AT, used(input=7))],
        extra=(
            torn,  # a line cut by a kill
            jsonl.dumps(line(usage={"input": -3, "output": 1})),  # a negative count
            jsonl.dumps(line(usage="lots")),  # not an object
            jsonl.dumps({**line(usage={"input": 1}), "at": "yesterday"}),  # no usable time
            b'{"v":1,"event":{"type":"ToolUse","tool":"x"',  # torn, but not usage: not our business
            b"",
            good,
        ),
    )
    stats = ScanStats()
    samples = list(scan(trace_files(tmp_path), stats))
    assert [s.input for s in samples] == [7, 5]
    assert stats.skipped_lines == 4 and stats.skipped_files == 0


def test_an_unreadable_trace_is_skipped_and_counted(tmp_path: Path) -> None:
    write_trace(tmp_path, "good", [(AT, used(input=3))])
    trace_path(tmp_path, "bad").mkdir(parents=True)  # a directory where the file should be
    stats = ScanStats()
    samples = list(scan(trace_files(tmp_path), stats))
    assert [s.run_id for s in samples] == ["good"]
    assert stats.skipped_files == 1 and stats.files == 2
    assert "bad" in stats.problems[0] and stats.problems[0].startswith("skipped ")


def test_tolerant_conversions() -> None:
    sample = sample_from_dict(line(usage={"input": 10.0, "output": 2, "costUsd": 1}, clone=True), "hint")
    assert sample is not None
    assert (sample.input, sample.cost_usd, sample.clone) == (10, 1.0, None)
    offset = sample_from_dict({**line(usage={}), "at": "2026-10-20T12:00:00+02:00", "runId": None}, "hint")
    assert offset is not None and offset.at == AT and offset.run_id == "hint"
    assert sample_from_dict(line(usage={"input": 1, "costUsd": "free"})) is None
    assert sample_from_dict(line(usage={"input": True})) is None
    assert (
        sample_from_dict({**line(usage={}), "event": {"type": "TokensUsed", "usage": {}}}) is None
    )  # no agent
    assert sample_from_dict([1, 2]) is None


def test_missing_runs_dir_reads_nothing(tmp_path: Path) -> None:
    assert trace_files(tmp_path) == []
    assert list(read_samples(tmp_path / "nope.jsonl", stats := ScanStats())) == []
    assert stats.skipped_files == 1


def test_runs_dir_is_the_traces_own(tmp_path: Path) -> None:
    # flowd.cost keeps its own copy so that `flowd cost` does not import the trace machinery.
    assert runs_dir(tmp_path) == trace.runs_dir(tmp_path)
