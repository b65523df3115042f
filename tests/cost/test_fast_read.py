"""The chunked reader (`read_samples`) gives exactly what parsing each line on its own gives, for
the writer's own lines, odd lines among them, and every chunk size (docs/performance.md: cost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowd.cost import samples
from flowd.cost.samples import ScanStats, read_samples

from .traces import started, used, write_trace

AT = "2026-10-25T01:30:00.000Z"

EVENTS = [
    (AT, started(budget=2.5)),
    (AT, used(input=1200, output=80, lane="s1", executor="claude", clone=2, model="claude-sonnet-4-5")),
    ("2026-10-25T01:31:59.999Z", used("reviewer", model=None, input=5, output=0, estimated=True)),
    (AT, used(input=10, output=3, cached_read=4, cache_write=2, cost=0.0125, lane="", executor="x", clone=0)),
    (AT, used("judge", model="", input=0, output=0, cost=3.0, clone=-4)),
    (AT, used("planner", model="mödel", input=7, output=1, cost=1.5e-7, lane="straße")),
]

ODD = (
    b'{"v":1,"seq":90,"at":"2026-10-25T01:30:00Z","runId":"r","event":{"type":"TokensUsed","agent":"a",'
    b'"usage":{"input":1,"output":2}}}',  # another writer: no millisecond, no total
    b'{"v":1,"seq":91,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"TokensUsed",'
    b'"agent":"a\\"b","usage":{"input":1,"output":2,"total":3},"estimated":false}}',  # an escape
    b'{"v": 1, "event": {"type": "TokensUsed", "agent": "c", "usage": {"input": 4}}, "at": "2026-10-25T02:00:00.000Z"}',
    b'{"v":1,"seq":92,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"TokensUsed","agent":"a",'
    b'"usage":{"input":-1,"output":2,"total":1},"estimated":false}}',  # a negative count: skipped
    b'{"v":1,"seq":93,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"TokensUsed"',  # torn
    b'{"v":1,"seq":94,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"ToolUse","tool":"TokensUsed"}}',
)


def _reference(path: Path) -> tuple[list[samples.Sample], ScanStats]:
    stats = ScanStats()
    found = list(samples._read_lines(path.read_bytes().splitlines(keepends=True), stats, "hint"))
    return found, stats


@pytest.mark.parametrize("chunk", [1, 7, 100, 333, 1 << 20])
@pytest.mark.parametrize("odd", [False, True])
def test_chunked_reader_equals_the_line_by_line_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, odd: bool
) -> None:
    path = write_trace(tmp_path, "r1", EVENTS * 3, extra=ODD if odd else ())
    if not odd:  # the last line without its newline (a run killed mid-write leaves one)
        path.write_bytes(path.read_bytes().rstrip(b"\n"))
    expected, expected_stats = _reference(path)
    monkeypatch.setattr(samples, "_CHUNK", chunk)
    stats = ScanStats()
    got = list(read_samples(path, stats, "hint"))
    assert got == expected
    assert (stats.skipped_lines, stats.budgets, stats.epics) == (
        expected_stats.skipped_lines,
        expected_stats.budgets,
        expected_stats.epics,
    )
    assert len(got) == 15 + (3 if odd else 0)


def test_the_writers_usage_lines_take_the_one_scan(tmp_path: Path) -> None:
    path = write_trace(tmp_path, "r1", EVENTS)
    text = "\n" + path.read_text(encoding="utf-8")
    assert len(samples._CANONICAL.findall(text)) == len(EVENTS) - 1
