"""Approve before merge in Neovim, end to end (docs/answers.md: `merge`): the plugin launches with
`pause_on_merge`, the finished story's approval reaches the user as a notification and a `ready`
lane, :FlowReview shows its diff against the epic, :FlowRequestChanges sends it back with free text,
and `ga` in the review buffer approves it the second time, so it merges what was approved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.scenario import Scenario, coder, git, story
from tests.nvim.conftest import drive
from tests.server.demo_repo import kill_runs

SHOUT = {"when": {"role": "coder", "story": "a", "prompt": "shout it"}, "writes": {"a.txt": "LOUD\n"}}


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Scenario]:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"])],
        [SHOUT, coder("a", {"a.txt": "quiet\n"})],
        files={"a.txt": "before\n"},
        epic_id="ok",
    )
    yield sc
    kill_runs(sc.repo)


def test_changes_then_approval_from_neovim(nvim: Path, repo: Scenario, tmp_path: Path) -> None:
    sc = repo
    out = drive(nvim, "approve.lua", tmp_path, {"REPO": str(sc.repo), "PLAN": str(sc.plan_path)})
    assert out["pause_on"] == ["budget", "blocked", "noExecutor", "merge"]
    assert out["nothing"] == "flowd: no story is waiting for approval"
    assert "Story a is ready to merge" in out["asked"]["msg"] and out["asked"]["level"] == 3
    assert "ready" in out["lanes_ready"]
    assert out["review_ft"] == "diff" and out["review_name"].endswith("/a")
    assert "-before" in out["review"] and "+quiet" in out["review"]
    assert {"ga", "gr"} <= set(out["review_maps"])
    assert out["inputs"] == ["flowd: changes for story a: "]
    assert "goes back to its coder" in out["sent_back"]
    assert "+LOUD" in out["review_again"]
    assert "merges next" in out["approved"]
    assert git(sc.repo, "show", "epic/ok:a.txt") == "LOUD\n"
    run = next((sc.repo / ".flow" / "runs").iterdir())
    events = [json.loads(line)["event"] for line in (run / "trace.jsonl").read_text().splitlines()]
    answered = [(e["effect"], e["by"], e["answer"]) for e in events if e["type"] == "StoryAnswered"]
    assert answered == [("revise", "editor", "shout it"), ("approve", "editor", "approve")]
