"""Duration estimates for the launch order: sizes, earlier runs, and the rank they give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flowd.events.model import RunStarted
from flowd.plan.graph import critical_path_rank, estimate_durations, launch_order, story_size
from flowd.trace.log import RunRecord, TraceWriter, story_durations, trace_path, write_run_record
from tests.plan.helpers import plan, story


@pytest.mark.parametrize(
    ("fields", "size"),
    [
        ({}, 2.0),  # itself + one owned path
        ({"owned": ["a", "b", "c"]}, 4.0),
        ({"acceptance": ["x", "y"]}, 6.0),
        ({"description": "d" * 800}, 4.0),
        ({"owned": ["a", "b"], "acceptance": ["x"], "description": "d" * 200}, 5.5),
    ],
)
def test_story_size_counts_paths_criteria_and_description(fields: dict[str, object], size: float) -> None:
    assert story_size(plan(story("s", **fields)).stories[0]) == size


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ({}, {"small": 2.0, "big": 6.0, "new": 4.0}),  # sizes only: units
        ({"small": 100.0}, {"small": 100.0, "big": 300.0, "new": 200.0}),  # 50 s per unit
        ({"small": 100.0, "big": 90.0}, {"small": 100.0, "big": 90.0, "new": 200.0}),  # upper median rate
        ({"small": 0.0}, {"small": 2.0, "big": 6.0, "new": 4.0}),  # a zero measurement is no measurement
        ({"gone": 500.0}, {"small": 2.0, "big": 6.0, "new": 4.0}),  # stories no longer planned
    ],
)
def test_estimates_prefer_history_and_scale_sizes_by_it(
    history: dict[str, float], expected: dict[str, float]
) -> None:
    p = plan(
        story("small"),
        story("big", acceptance=["x", "y"]),
        story("new", owned=["a", "b", "c"]),
    )
    assert estimate_durations(p, history) == pytest.approx(expected)


def test_a_long_story_outranks_a_longer_chain_of_short_ones() -> None:
    p = plan(
        story("chain-1"),
        story("chain-2", dependsOn=["chain-1"]),
        story("chain-3", dependsOn=["chain-2"]),
        story("big", acceptance=["a", "b", "c", "d"], description="d" * 2000),
    )
    by_count = critical_path_rank(p)
    by_time = critical_path_rank(p, estimate_durations(p))
    assert launch_order(p, ["chain-1", "big"], by_count) == ["chain-1", "big"]
    assert launch_order(p, ["chain-1", "big"], by_time) == ["big", "chain-1"]
    history = {"chain-1": 600.0, "big": 60.0}  # measured: the chain's head is the slow one
    assert launch_order(p, ["chain-1", "big"], critical_path_rank(p, estimate_durations(p, history))) == [
        "chain-1",
        "big",
    ]


def _run(repo: Path, run_id: str, started_at: str, events: list[tuple[str, object]]) -> None:
    write_run_record(
        repo, RunRecord(run_id=run_id, epic_id="e", plan="p.json", pid=os.getpid(), started_at=started_at)
    )
    path = trace_path(repo, run_id)
    writer = TraceWriter(path, run_id)
    writer.emit(
        RunStarted(epic_id="e", epic_branch="epic/e", plan="p.json", stories=["a", "b"], concurrency=2)
    )
    writer.close()
    lines = path.read_bytes().splitlines()
    for n, (at, event) in enumerate(events, start=2):
        envelope = f'{{"v":1,"seq":{n},"at":"{at}","runId":"{run_id}","event":{event}}}'
        lines.append(envelope.encode())
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_story_durations_measure_start_to_merge_and_the_latest_run_wins(tmp_path: Path) -> None:
    active = '{"type":"StoryStatusChanged","story":"%s","status":"active"}'
    merged = '{"type":"StoryMerged","lane":"%s","branch":"story/e/%s","commit":"c"}'
    _run(
        tmp_path,
        "r1",
        "2026-11-01T00:00:00.000Z",
        [
            ("2026-11-01T00:00:00.000Z", active % "a"),
            ("2026-11-01T00:00:10.000Z", active % "b"),
            ("2026-11-01T00:01:40.000Z", merged % ("a", "a")),  # a: 100 s
            ("2026-11-01T00:02:00.000Z", '{"type":"StoryStatusChanged","story":"b","status":"failed"}'),
        ],
    )
    _run(
        tmp_path,
        "r2",
        "2026-11-02T00:00:00.000Z",
        [
            ("2026-11-02T00:00:00.000Z", active % "a"),
            ("2026-11-02T00:00:30.000Z", merged % ("a", "a")),  # a again: 30 s, the newer figure
            ("2026-11-02T00:01:00.000Z", active % "b"),
            ("2026-11-02T00:01:05.000Z", "not an event"),
        ],
    )
    assert story_durations(tmp_path) == {"a": 30.0}  # b never merged: no measurement
