"""The status vocabularies and their mapping, as tables (docs/architecture.md: Names)."""

from __future__ import annotations

from typing import get_args

import pytest

from flowd.events.statuses import (
    RUN_OUTCOMES,
    LaneStatus,
    OutcomeStatus,
    ReportStatus,
    RunStatus,
    StoryFileStatus,
    StoryStatus,
    lane_status_of,
    report_status,
    run_status_of,
)


def test_the_vocabularies_are_the_wires() -> None:
    assert get_args(StoryFileStatus) == ("started", "merged", "failed")
    assert get_args(StoryStatus) == ("planned", "active", "waiting", "ready", "done", "failed", "skipped")
    assert set(get_args(LaneStatus)) == {*get_args(StoryStatus), "queued", "merging"}
    assert get_args(ReportStatus) == get_args(LaneStatus)


@pytest.mark.parametrize(
    ("outcome", "shown"),
    [
        ("done", "done"),
        ("failed", "failed"),
        ("waiting", "waiting"),
        ("cancelled", "waiting"),
        ("paused", "waiting"),
    ],
)
def test_an_outcome_shows_as_a_story_status(outcome: OutcomeStatus, shown: StoryStatus) -> None:
    assert lane_status_of(outcome) == shown


def test_every_outcome_has_a_story_status() -> None:
    assert {lane_status_of(o) for o in get_args(OutcomeStatus)} <= set(get_args(StoryStatus))


@pytest.mark.parametrize(
    ("lane", "reported"),
    [(None, "planned"), ("planned", "planned"), ("active", "active"), ("queued", "queued"), ("done", "done")],
)
def test_the_report_says_the_lanes_status_or_planned(lane: LaneStatus | None, reported: ReportStatus) -> None:
    assert report_status(lane) == reported


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("done", "done"),
        ("failed", "failed"),
        ("cancelled", "cancelled"),
        ("halted", "halted"),
        (None, "interrupted"),  # killed: its run.json has no outcome
        ("exploded", "interrupted"),  # a word this flowd does not know
    ],
)
def test_a_gone_runs_status_is_its_recorded_outcome_or_interrupted(outcome: str | None, status: str) -> None:
    assert run_status_of(outcome) == status


def test_every_run_outcome_is_a_run_status() -> None:
    assert set(RUN_OUTCOMES) < set(get_args(RunStatus))
