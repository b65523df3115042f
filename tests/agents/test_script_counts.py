"""`times` bookkeeping: one locked file per script, shared by threads and processes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from flowd.agents.script_agent import default_reply
from flowd.agents.script_counts import STATE_ENV, RunCounts


def test_concurrent_takers_never_lose_a_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    script = tmp_path / "a.script.json"
    script.write_text("{}")

    def work() -> None:
        counts = RunCounts(script, script.read_bytes())  # each thread opens the file on its own
        for _ in range(25):
            counts.take("run-1", lambda _counts: 0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    state = json.loads(RunCounts(script, script.read_bytes()).path.read_text())
    assert state["runs"]["run-1"] == {"0": 100}


def test_scripts_sharing_a_state_dir_keep_their_own_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_ENV, str(tmp_path / "state"))
    first, second = tmp_path / "one.json", tmp_path / "two.json"
    first.write_text('{"rules": [{"times": 1}]}')
    second.write_text('{"rules": [{"times": 1}]}')
    once = lambda counts: None if counts.get(0, 0) >= 1 else 0  # noqa: E731
    assert RunCounts(first, first.read_bytes()).take("r", once) == 0
    assert RunCounts(second, second.read_bytes()).take("r", once) == 0
    assert RunCounts(first, first.read_bytes()).take("r", once) is None
    assert RunCounts(first, first.read_bytes()).take("other-run", once) == 0


def test_default_replies_follow_the_contract() -> None:
    assert json.loads(default_reply("planner", "api", "epic")) == {
        "tasks": [{"title": "api", "description": "Do api.\nDepends on: none"}]
    }
    assert json.loads(default_reply("planner", None, "epic"))["tasks"][0]["title"] == "epic"
    assert json.loads(default_reply("judge", "api", "epic")) == {"issues": [], "summary": "ok"}
    assert default_reply("coder", "api", "epic").endswith("TASK_ALREADY_SATISFIED")
