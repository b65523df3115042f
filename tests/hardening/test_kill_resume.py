"""The kill campaign, small: a 4-story epic with real gates, `flowd run` SIGKILLed at three chosen
moments (the first coder turn, just after the first merge, between a merge and its rollback), rerun
each time until it ends, then checked against an uninterrupted run (`bench/kill_resume.py` has the full campaign and the checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.kill_resume import Shape, campaign


@pytest.mark.slow
def test_three_kills_on_a_four_story_epic_lose_nothing_and_double_nothing(tmp_path: Path) -> None:
    log: list[str] = []
    report = campaign(
        tmp_path, size=4, kills=3, seed=3, moments=["coder turn", "after merge", "rollback"], log=log.append
    )
    assert report.failures == [], "\n".join(log)
    assert report.kills_tried == 3 and report.kills_survived == 3, "\n".join(log)
    assert report.moments == {"rollback": 1, "coder turn": 1, "after merge": 1}
    assert report.leftovers == 0
    assert set(report.checks.values()) == {report.rounds} and len(report.checks) == 6


@pytest.mark.slow
@pytest.mark.timeout(420)  # a reference run and two rounds with 2-s epic gates, on a loaded machine
def test_kills_mid_batch_and_mid_bisect_merge_each_story_once_and_leave_the_epic_green(
    tmp_path: Path,
) -> None:
    # Six stories; every epic gate run takes 2 s and `flaky`'s coder turn is held back, so `flaky`
    # and `models` queue behind `cli`'s candidate and are gated as one batch, which the policy
    # gate turns red: the train bisects it (docs/merging.md). Killed while it bisects, then while a
    # batch is gated; the kill campaign's checks then hold against an uninterrupted run. The bisect
    # kill comes first: a resumed run's stories are ready at other moments than a fresh run's, so a
    # rerun may gate `flaky` alone and never bisect, while every run gates some batch.
    log: list[str] = []
    shape = Shape(epic_sleep=2, delays=(("flaky", 800),), settings="mergeConcurrency = 1\n")
    report = campaign(
        tmp_path, size=6, kills=2, seed=5, moments=["mid bisect", "mid batch"], log=log.append, shape=shape
    )
    assert report.failures == [], "\n".join(log)
    assert report.kills_survived == report.kills_tried, "\n".join(log)
    assert report.moments == {"mid batch": 1, "mid bisect": 1}, "\n".join(log)
    assert report.leftovers == 0
    assert set(report.checks.values()) == {report.rounds}
