"""The kill campaign, small: a 4-story epic with real gates, `flowd run` SIGKILLed at three chosen
moments (the first coder turn, just after the first merge, between a merge and its rollback), rerun
each time until it ends, then checked against an uninterrupted run (`bench/kill_resume.py` has the full campaign and the checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.kill_resume import campaign


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
