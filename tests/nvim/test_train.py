"""The Neovim plugin shows the merge train (docs/merging.md) of a real run in its lanes buffer."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.scenario import Scenario, coder, story
from tests.nvim.conftest import drive
from tests.server.demo_repo import kill_runs

# Slow on the epic only (a candidate is named `_epic`): the lane stays `merging` a while.
SLOW_EPIC = 'sh -c \'[ "$(basename "$(pwd)")" = _epic ] && sleep 3; exit 0\''


def test_the_lanes_buffer_shows_a_story_merging_in_its_batch(nvim: Path, tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [coder("a", {"a/x.txt": "x\n"})],
        settings=f"gates = {json.dumps([SLOW_EPIC])}\njudgeRounds = 0\nmaxReviewRounds = 0\n",
    )
    try:
        out = drive(nvim, "train.lua", tmp_path, {"REPO": str(sc.repo), "PLAN": str(sc.plan_path)})
    finally:
        kill_runs(sc.repo)
    assert out["merging"].split()[1:3] == ["merging", "#1"]
    lane = next(line for line in out["lanes"] if line.startswith("  a "))
    assert lane.split()[1] == "done" and "#" not in lane.split()[2]
