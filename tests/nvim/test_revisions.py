"""The Neovim plugin shows merge revisions and flaky gates (docs/revisions.md) of a real run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.scenario import Scenario, coder, story
from tests.engine.test_revisions import NEEDS_FIX, fix_rule, flaky_gate, gate_state, sandbox_allowing
from tests.nvim.conftest import drive
from tests.server.demo_repo import kill_runs


def test_the_lanes_buffer_shows_a_merge_revision_and_a_flaky_gate(nvim: Path, tmp_path: Path) -> None:
    gates = [flaky_gate(gate_state(tmp_path) / "flaked-once"), NEEDS_FIX]
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [fix_rule(), coder("a", {"a/x.txt": "x\n"})],
        settings=f"gates = {json.dumps(gates)}\njudgeRounds = 0\nmaxReviewRounds = 1\n"
        + sandbox_allowing(gate_state(tmp_path)),
    )
    try:
        out = drive(nvim, "revisions.lua", tmp_path, {"REPO": str(sc.repo), "PLAN": str(sc.plan_path)})
    finally:
        kill_runs(sc.repo)
    assert out["revision_note"] == "flowd: a: epic gates red after merging; merge undone, merge revision 1"
    assert out["flaky_note"] == "flowd: a: flaky gates: 1 (green only on a rerun; not charged)"
    lane = next(line for line in out["lanes"] if line.startswith("  a "))
    assert lane.split()[1] == "done"
    assert lane.endswith("  merge revision 1  flaky gates: 1")
