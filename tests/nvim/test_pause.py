"""Pause and ask in Neovim, end to end (docs/answers.md): the plugin launches with `pauseOn`, a
scripted coder's BLOCKED_ON reaches the user as a notification and a statusline count,
`:FlowAnswer` takes the answer through vim.ui.select/vim.ui.input, and the story goes on with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.scenario import Scenario, coder, story
from tests.nvim.conftest import drive
from tests.server.demo_repo import kill_runs

BLOCKED = {"reply": "Stuck.\nBLOCKED_ON: which greeting the product wants", "times": 1}
TOLD = {
    "when": {"role": "coder", "story": "hello", "prompt": "say HOWDY"},
    "writes": {"hello.txt": "howdy\n"},
}


@pytest.fixture
def blocked_repo(tmp_path: Path) -> Iterator[Scenario]:
    sc = Scenario.create(
        tmp_path, [story("hello", ["hello.txt"])], [coder("hello", **BLOCKED), TOLD], epic_id="greet"
    )
    yield sc
    kill_runs(sc.repo)


def test_a_blocked_story_is_answered_from_neovim(nvim: Path, blocked_repo: Scenario, tmp_path: Path) -> None:
    sc = blocked_repo
    out = drive(nvim, "pause.lua", tmp_path, {"REPO": str(sc.repo), "PLAN": str(sc.plan_path)})
    assert out["errors"] == []
    assert out["nothing"] == "flowd: nothing waits for an answer"
    assert out["blocked"]["level"] == 3  # vim.log.levels.WARN
    assert (
        "Story hello is blocked on unplanned work: which greeting the product wants" in out["blocked"]["msg"]
    )
    assert out["statusline_paused"].endswith("⚑ 1")
    assert out["selects"][0]["items"] == ["stop", "other answer…"]
    assert out["inputs"] == ["flowd answer: "]
    assert out["answered"].startswith("flowd: Answered the blocked pause of story hello")
    assert "say HOWDY to everyone" in out["cleared"]
    assert "⚑" not in out["statusline_done"]
    assert "hello.txt" in sc.epic_files("epic/greet")
