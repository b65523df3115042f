from __future__ import annotations

import os
from pathlib import Path

from flowd.events.model import Info, RunEnded, RunStarted
from flowd.trace.log import (
    RunRecord,
    TraceFollower,
    TraceWriter,
    is_active,
    list_runs,
    read_trace,
    trace_path,
    write_run_record,
)


def test_writer_appends_flushed_lines_and_resumes_seq(tmp_path: Path) -> None:
    path = trace_path(tmp_path, "r1")
    writer = TraceWriter(path, "r1")
    writer.emit(RunStarted(epic_id="e", epic_branch="epic/e", plan="p.json", stories=["a"], concurrency=1))
    writer.emit(Info(message="hello"))
    # Visible to a reader before close: flushed per event.
    assert [e.seq for e in read_trace(path)] == [1, 2]
    writer.close()
    with path.open("ab") as handle:
        handle.write(b'{"v": 1, "seq": 3, "at": "x", "ru')  # a line torn by a kill
    again = TraceWriter(path, "r1")
    again.emit(RunEnded(outcome="done", done=1, failed=0, skipped=0))
    again.close()
    events = list(read_trace(path))
    assert [e.seq for e in events] == [1, 2, 3]
    assert isinstance(events[-1].event, RunEnded)


def test_follower_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = trace_path(tmp_path, "r2")
    follower = TraceFollower(path)
    assert follower.poll() == []
    writer = TraceWriter(path, "r2")
    writer.emit(Info(message="one"))
    assert [e.seq for e in follower.poll()] == [1]
    with path.open("ab") as handle:
        handle.write(b'{"v": 1, "seq": 2, "at": "2026-11-29T00:00:00.000Z", "runId": "r2", ')
    assert follower.poll() == []
    with path.open("ab") as handle:
        handle.write(b'"event": {"type": "Info", "message": "two"}}\nnot json\n')
    assert [e.seq for e in follower.poll()] == [2]
    writer.close()


def test_list_runs_newest_first_and_liveness(tmp_path: Path) -> None:
    write_run_record(
        tmp_path,
        RunRecord(
            run_id="old",
            epic_id="e",
            plan="p",
            pid=os.getpid(),
            started_at="2026-11-28T00:00:00.000Z",
            ended_at="2026-11-28T01:00:00.000Z",
        ),
    )
    write_run_record(
        tmp_path,
        RunRecord(
            run_id="new", epic_id="e", plan="p", pid=os.getpid(), started_at="2026-11-29T00:00:00.000Z"
        ),
    )
    (tmp_path / ".flow/runs/broken").mkdir()
    (tmp_path / ".flow/runs/broken/run.json").write_text("{", encoding="utf-8")
    runs = list_runs(tmp_path)
    assert [r.run_id for r in runs] == ["new", "old"]
    assert is_active(runs[0]) and not is_active(runs[1])
    assert not is_active(runs[0].model_copy(update={"pid": 2**22 + 12345}))


def test_an_event_after_close_is_dropped_not_raised(tmp_path: Path) -> None:
    path = trace_path(tmp_path, "r3")
    writer = TraceWriter(path, "r3")
    writer.emit(Info(message="one"))
    writer.close()
    writer.emit(Info(message="late"))
    assert [e.seq for e in read_trace(path)] == [1]
