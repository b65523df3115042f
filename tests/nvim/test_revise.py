"""`:FlowRevise` in real Neovim against a real `flowd serve` and `flowd run`: a comment on a line of
a story worktree's file, and one in the main checkout (story picked with vim.ui.select, text typed
in vim.ui.input), become revision tasks the stories' coders take; refusals are one sentence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.scenario import Scenario, git
from tests.engine.test_review_comments import two_stories
from tests.nvim.conftest import drive
from tests.server.demo_repo import kill_runs


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Scenario]:
    made = two_stories(tmp_path / "work", tmp_path / "go-a", tmp_path / "go-b")
    yield made
    kill_runs(made.repo)


def test_flow_revise(nvim: Path, scenario: Scenario, tmp_path: Path) -> None:
    repo = scenario.repo
    out = drive(
        nvim,
        "revise.lua",
        tmp_path,
        {
            "REPO": str(repo),
            "PLAN": str(scenario.plan_path),
            "WORKTREES": str(scenario.worktree_root),
            "GO_A": str(tmp_path / "go-a"),
            "GO_B": str(tmp_path / "go-b"),
        },
    )
    assert (
        out["worktree_reply"]["msg"]
        == "flowd: Story a takes the revision on a.txt:1 next, after its current task."
    )
    assert (
        out["checkout_reply"]["msg"]
        == "flowd: Story b takes the revision on b.txt:1 when it starts or continues."
    )
    assert out["offered"] == [f"b (planned, run {out['run_id']})"] or out["offered"] == [
        f"b (waiting, run {out['run_id']})"
    ]
    assert out["prompts"] == ["flowd revision for b, line 1: "]
    assert out["bad_line"]["level"] == 4 and "a.txt:3 is past the end of the file" in out["bad_line"]["msg"]
    assert "\n" not in out["bad_line"]["msg"]
    assert out["unowned"]["msg"].startswith("flowd: no story of a live run can take a revision of ")
    assert out["merged"] == {
        "level": 4,
        "msg": "flowd: flow.addRevision: Story a has already merged into epic/ep; "
        "nothing was changed (review the epic branch instead).",
    }

    events = [
        json.loads(line)["event"]
        for line in (repo / ".flow" / "runs" / out["run_id"] / "trace.jsonl").read_text().splitlines()
    ]
    asked = [
        (e["lane"], e["path"], e["line"], e["text"], e["by"])
        for e in events
        if e["type"] == "RevisionRequested"
    ]
    assert asked == [("a", "a.txt", 1, "make it loud", "editor"), ("b", "b.txt", 1, "add a header", "editor")]
    assert git(repo, "show", "epic/ep:a.txt") == "LOUD\n"
    assert git(repo, "show", "epic/ep:b.txt") == "HEADER\nb\n"
