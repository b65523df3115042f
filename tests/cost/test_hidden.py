"""The cost report says, per executor, when its agent program makes requests flowd cannot see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowd.cost.cli import cost_report_for
from flowd.cost.hidden import hidden_requests, roster_commands

from .traces import used, write_trace

FLOWD = str(Path(sys.executable).parent / "flowd")
ROSTER = """
[[executors]]
id = "claude"
kind = "acp"
command = ["claude-agent-acp"]
env = { ANTHROPIC_API_KEY = "${FLOWD_TEST_UNSET_KEY}" }

[[executors]]
id = "codex"
kind = "acp"
command = ["codex-acp"]

[[executors]]
id = "npx-claude"
kind = "acp"
command = ["npx", "-y", "@agentclientprotocol/claude-agent-acp@0.101.0"]
"""


def _repo(tmp_path: Path, executors: list[str]) -> Path:
    repo = tmp_path / "repo"
    (repo / ".flow").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".flow" / "roster.toml").write_text(ROSTER)
    events = [
        (f"2026-10-24T21:3{i}:00.000Z", used("reviewer", input=100 + i, output=10, executor=name))
        for i, name in enumerate(executors)
    ]
    write_trace(repo, "r1", list(events))
    return repo


def _cost(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(repo.parent / "config")}  # no user roster
    env.pop("FLOWD_TEST_UNSET_KEY", None)
    return subprocess.run(
        [FLOWD, "cost", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_report_names_the_executor_whose_program_hides_requests(tmp_path: Path) -> None:
    repo = _repo(tmp_path, ["claude", "codex"])
    done = _cost(repo, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["hiddenRequests"]
    assert [(r["executor"], r["program"]) for r in rows] == [("claude", "claude-agent-acp")]
    assert "session title" in rows[0]["requests"]
    text = _cost(repo)
    assert text.returncode == 0, text.stderr
    notes = [line for line in text.stdout.splitlines() if "flowd cannot see" in line]
    assert len(notes) == 1 and notes[0].startswith("* executor claude runs claude-agent-acp,"), notes
    md = _cost(repo, "--md")
    assert "- executor claude runs claude-agent-acp, which makes model requests flowd cannot see" in md.stdout


def test_no_note_and_no_field_when_no_executor_hides_requests(tmp_path: Path) -> None:
    repo = _repo(tmp_path, ["codex"])
    done = _cost(repo, "--json")
    assert done.returncode == 0, done.stderr
    assert "hiddenRequests" not in json.loads(done.stdout)
    assert "flowd cannot see" not in _cost(repo).stdout


def test_the_roster_is_read_as_a_run_merges_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path, [])
    user = tmp_path / "user.toml"
    user.write_text('[[executors]]\nid = "mine"\nkind = "acp"\ncommand = ["/opt/bin/claude-agent-acp"]\n')
    (repo / ".flow" / "roster.toml").write_text(ROSTER + '\n[[executors]]\nid = "codex"\ndisabled = true\n')
    commands = roster_commands(repo, user)
    assert sorted(commands) == ["claude", "mine", "npx-claude"]
    rows = hidden_requests(repo, ["codex", "mine", "npx-claude", "gone"], user)
    assert [(r.executor, r.program) for r in rows] == [
        ("mine", "claude-agent-acp"),
        ("npx-claude", "claude-agent-acp"),
    ]


def test_an_unreadable_roster_adds_no_note(tmp_path: Path) -> None:
    repo = _repo(tmp_path, ["claude"])
    (repo / ".flow" / "roster.toml").write_text("[[executors]\nid = ")
    assert hidden_requests(repo, ["claude"], tmp_path / "none.toml") == []


def test_the_editor_gets_the_same_rows_and_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # flow/costReport serves `cost_report_for` (flowd/server/features/cost.py).
    repo = _repo(tmp_path, ["claude", "codex"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    report = cost_report_for(repo, fmt="json")
    assert isinstance(report, dict)
    assert [r["executor"] for r in report["hiddenRequests"]] == ["claude"]
    text = cost_report_for(repo, fmt="markdown")
    assert isinstance(text, str) and "executor claude runs claude-agent-acp" in text
