"""Fixtures for the ACP executor tests: a real repository with a story worktree, scripts on disk."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from flowd.agents.acp_client import AcpExecutor
from flowd.agents.base import FlowdMeta, TurnRequest
from flowd.agents.factory import script_command


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A story worktree of a fresh repository, as the engine makes them."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / "README.md").write_text("hello\n")
    _git(repo, "add", "README.md")
    _git(repo, "commit", "-q", "-m", "init")
    tree = tmp_path / "repo.flowd" / "epic" / "api"
    _git(repo, "worktree", "add", "-q", "-b", "story/epic/api", str(tree))
    return tree


@pytest.fixture(autouse=True)
def script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`times` counts stay inside the test's temp dir (the executor passes this variable on)."""
    state = tmp_path / "script-state"
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(state))
    return state


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[..., Path]:
    def write(rules: list[dict[str, Any]], name: str = "agent.script.json", model: str = "scripted") -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"model": model, "rules": rules}))
        return path

    return write


@pytest.fixture
async def executors(tmp_path: Path) -> AsyncIterator[Callable[..., AcpExecutor]]:
    """Makes scripted-agent executors and closes every one of them at the end."""
    made: list[AcpExecutor] = []

    def make(script: Path, label: str = "demo#1", **kwargs: Any) -> AcpExecutor:
        executor = AcpExecutor(
            label=label, command=script_command(script), log_path=tmp_path / "logs" / f"{label}.log", **kwargs
        )
        made.append(executor)
        return executor

    yield make
    for executor in made:
        await executor.close()


def request(
    cwd: Path,
    *,
    role: str = "coder",
    prompt: str = "do the task",
    run_id: str = "run-1",
    story: str | None = "api",
    task: str | None = "Add the login endpoint",
    turn_timeout_s: float = 60.0,
    stall_timeout_s: float = 30.0,
) -> TurnRequest:
    return TurnRequest(
        role=role,
        prompt=prompt,
        cwd=cwd,
        meta=FlowdMeta(role=role, run_id=run_id, epic_id="epic", story=story, task=task, task_index=1),
        turn_timeout_s=turn_timeout_s,
        stall_timeout_s=stall_timeout_s,
    )
