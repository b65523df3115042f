"""A lane's timeline keeps what a picture can show (docs/graph.md): spans shorter than a column of
the lane's life so far are merged into the span before them; the rest, and points, stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from flowd.trace import timeline
from flowd.trace.timeline import PhaseSpan

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    moment = T0 + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def lane(steps: list[tuple[str, float]], end: float | None = None) -> list[tuple[str, float, float | None]]:
    """The spans after entering each (phase, seconds) in turn, and closing at `end`; in seconds."""
    phases: list[PhaseSpan] = []
    for phase, when in steps:
        timeline.enter(phases, phase, at(when))
    if end is not None:
        timeline.close(phases, at(end))
    seconds = {at(s): s for _, s in steps} | ({at(end): end} if end is not None else {})
    return [(p.phase, seconds[p.start], seconds[p.end] if p.end is not None else None) for p in phases]


CASES = [
    (
        "a 50 ms gate 1000 s into the lane's life: under a column, merged into coding",
        [("planned", 0), ("coding", 10), ("gated", 1000), ("coding", 1000.05)],
        2000,
        [("planned", 0, 10), ("coding", 10, 2000)],
    ),
    (
        "a 2 s gate at the same time: over a column, kept",
        [("planned", 0), ("coding", 10), ("gated", 1000), ("coding", 1002)],
        2000,
        [("planned", 0, 10), ("coding", 10, 1000), ("gated", 1000, 1002), ("coding", 1002, 2000)],
    ),
    (
        "the same 50 ms gate 1 s into the lane's life: a column is 1 ms then, kept",
        [("planned", 0), ("coding", 0.5), ("gated", 1), ("coding", 1.05)],
        2,
        [("planned", 0, 0.5), ("coding", 0.5, 1), ("gated", 1, 1.05), ("coding", 1.05, 2)],
    ),
    (
        "a short queue and merge before the point: kept, as the point (only gates and coding merge)",
        [("planned", 0), ("coding", 10), ("queued", 1000), ("merging", 1000.01), ("merged", 1000.5)],
        None,
        [
            ("planned", 0, 10),
            ("coding", 10, 1000),
            ("queued", 1000, 1000.01),
            ("merging", 1000.01, 1000.5),
            ("merged", 1000.5, 1000.5),
        ],
    ),
    (
        "a short pause between two gates' coding: kept",
        [("planned", 0), ("coding", 10), ("paused", 500), ("coding", 500.2)],
        900,
        [("planned", 0, 10), ("coding", 10, 500), ("paused", 500, 500.2), ("coding", 500.2, 900)],
    ),
    (
        "short coding between two gates late in the life: one gated span",
        [
            ("planned", 0),
            ("coding", 10),
            ("gated", 1000),
            ("coding", 1003),
            ("gated", 1003.1),
            ("coding", 1006),
        ],
        2000,
        [("planned", 0, 10), ("coding", 10, 1000), ("gated", 1000, 1006), ("coding", 1006, 2000)],
    ),
    (
        "a short coding stretch after planned: planned is not a story's work, kept",
        [("planned", 0), ("coding", 1000), ("queued", 1000.2)],
        2000,
        [("planned", 0, 1000), ("coding", 1000, 1000.2), ("queued", 1000.2, 2000)],
    ),
]


@pytest.mark.parametrize(("steps", "end", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_spans_a_picture_cannot_show_are_merged(
    steps: list[tuple[str, float]], end: float | None, expected: list[tuple[str, float, float | None]]
) -> None:
    assert lane(steps, end) == expected


def test_columns_zero_keeps_every_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "COLUMNS", 0)
    spans = lane([("planned", 0), ("coding", 10), ("gated", 1000), ("coding", 1000.05)], 2000)
    assert spans == [
        ("planned", 0, 10),
        ("coding", 10, 1000),
        ("gated", 1000, 1000.05),
        ("coding", 1000.05, 2000),
    ]


def test_a_long_lane_stays_flat_and_whole() -> None:
    """20,000 gates (5 s of coding, then a 1 s gate), the lane's spans still tile its life: few of
    them (a column's worth of detail per stretch of the life), in order, with no gap."""
    phases: list[PhaseSpan] = []
    timeline.enter(phases, "planned", at(0))
    timeline.enter(phases, "coding", at(1))
    for n in range(20_000):
        timeline.gate_times(phases, "task", at(6 * n + 5), at(6 * n + 6))
        if n == 0:
            assert [p.phase for p in phases] == ["planned", "coding", "gated", "coding"]
    timeline.close(phases, at(120_000))
    assert len(phases) < 2_000, len(phases)  # 40,002 kept one by one
    assert phases[0].start == at(0) and phases[-1].end == at(120_000)
    assert all(a.end == b.start for a, b in pairwise(phases))
    assert {p.phase for p in phases} == {"planned", "gated", "coding"}
