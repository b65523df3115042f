"""The demo's sample repository, tuned for tests: no gates (speed), scripted delays on demand."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowd.demo.sample import build_sample_repo
from flowd.trace.log import list_runs, pid_alive


def sample(dest: Path, tune: Callable[[list[dict[str, Any]]], None] | None = None) -> tuple[Path, Path]:
    repo, plan = build_sample_repo(dest)
    (repo / ".flow" / "config.toml").write_text("gates = []\nconcurrency = 3\njudgeRounds = 1\n")
    if tune is not None:
        script_path = repo / ".flow" / "demo.script.json"
        script = json.loads(script_path.read_text())
        tune(script["rules"])
        script_path.write_text(json.dumps(script, indent=2))
    return repo, plan


def delay(rules: list[dict[str, Any]], role: str, story: str, ms: int, *, last: bool = False) -> None:
    """Set `delayMs` on the first (or last) rule answering `role` for `story`."""
    matching = [r for r in rules if r["when"].get("role") == role and r["when"].get("story") == story]
    (matching[-1] if last else matching[0])["delayMs"] = ms


def hold(rules: list[dict[str, Any]], role: str, story: str, release: Path) -> None:
    """Hold the first rule answering `role` for `story` until the test creates `release`: the
    lane is certainly still in that turn however slowly a loaded machine gets there (a fixed
    delay can run out first)."""
    first = next(r for r in rules if r["when"].get("role") == role and r["when"].get("story") == story)
    first["run"] = [f"while [ ! -e '{release}' ]; do sleep 0.05; done", *first.get("run", [])]


def kill_runs(repo: Path) -> None:
    """Kill every run process group of `repo` still alive (a test's own runs)."""
    for record in list_runs(repo):
        if pid_alive(record.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.pid, signal.SIGKILL)
