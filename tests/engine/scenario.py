"""Builds a real git repository with a plan, a scripted roster and settings for engine tests.

Nothing is faked: the roster's executors are the bundled scripted ACP agent run as subprocesses;
the gates are real shell commands.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowd.engine.runner import RunOptions, RunResult, run_epic
from flowd.events.model import Envelope
from flowd.trace.log import read_trace, trace_path

FLOWD = [sys.executable, "-m", "flowd"]


def story(sid: str, owned: list[str], depends: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "title": f"Story {sid}", "description": f"Build {sid}.", "owned": owned,
            "dependsOn": depends or [], **extra}  # fmt: skip


def coder(sid: str, writes: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"when": {"role": "coder", "story": sid}, "reply": f"{sid} done"}
    if writes is not None:
        rule["writes"] = writes
    rule.update(extra)
    return rule


# The five-story diamond epic the end-to-end tests run (locally and on Ray lanes).
DIAMOND = [
    story("base", ["src/base.py"]),
    story("left", ["src/left.py"], ["base"]),
    story("right", ["src/right.py"], ["base"]),
    story("top", ["src/top.py"], ["left", "right"]),
    story("docs", ["docs/"]),
]


def diamond_rules(delay: int = 0) -> list[dict[str, Any]]:
    """A coder rule per diamond story writing its one owned file (`docs/a.md` for the folder)."""
    return [
        coder(
            s["id"],
            {s["owned"][0] if not s["owned"][0].endswith("/") else "docs/a.md": f"# {s['id']}\n"},
            delayMs=delay,
        )
        for s in DIAMOND
    ]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@dataclass
class Scenario:
    repo: Path
    plan_path: Path
    executors: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        root: Path,
        stories: list[dict[str, Any]],
        rules: list[dict[str, Any]],
        *,
        settings: str = "",
        files: dict[str, str] | None = None,
        executors: list[dict[str, Any]] | None = None,
        epic_id: str = "ep",
    ) -> Scenario:
        repo = root / "repo"
        repo.mkdir(parents=True)
        for name, text in {"README.md": "# sample\n", **(files or {})}.items():
            path = repo / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        git(repo, "init", "-q", "-b", "main")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
        plan_path = repo / f"{epic_id}.epic.json"
        plan_path.write_text(
            json.dumps({"epicId": epic_id, "epic": "test epic", "stories": stories}), encoding="utf-8"
        )
        flow = repo / ".flow"
        flow.mkdir()
        scenario = cls(repo, plan_path)
        scenario.write_script(rules)
        scenario.executors = executors or [{"id": "demo", "script": "script.json", "slots": 3}]
        scenario.write_roster()
        (flow / "config.toml").write_text(
            settings or "judgeRounds = 0\nmaxReviewRounds = 1\n", encoding="utf-8"
        )
        return scenario

    def write_script(
        self, rules: list[dict[str, Any]], name: str = "script.json", model: str = "test-model"
    ) -> None:
        (self.repo / ".flow" / name).write_text(
            json.dumps({"model": model, "rules": rules}), encoding="utf-8"
        )

    def write_roster(self) -> None:
        lines = []
        for spec in self.executors:
            lines.append("[[executors]]")
            for key, value in {
                "kind": "script",
                "roles": ["planner", "coder", "reviewer", "judge"],
                **spec,
            }.items():
                lines.append(f"{key} = {json.dumps(value)}")
        (self.repo / ".flow" / "roster.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def run(self, **options: Any) -> RunResult:
        return asyncio.run(
            run_epic(RunOptions(plan=self.plan_path, cwd=self.repo, handle_signals=False, **options))
        )

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        """`flowd run` as a real process (its own process group, so a test can kill all of it)."""
        return subprocess.Popen(
            [*FLOWD, "run", str(self.plan_path), "--json", *args],
            cwd=self.repo,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def events(self, run_id: str) -> list[Envelope]:
        return list(read_trace(trace_path(self.repo, run_id)))

    def epic_files(self, branch: str = "epic/ep") -> list[str]:
        return git(self.repo, "ls-tree", "-r", "--name-only", branch).split()

    def merge_commits(self, branch: str = "epic/ep") -> list[str]:
        return [
            line
            for line in git(self.repo, "log", "--format=%s", branch).splitlines()
            if ": merge story " in line
        ]

    @property
    def worktree_root(self) -> Path:
        return self.repo.parent / "repo.flowd"

    def lanes_left(self, epic: str = "ep", timeout: float = 60.0) -> list[str]:
        """What is left under the epic's worktree folder once a `flowd run` process's background
        removal of its leftover worktrees (the `_trash`, engine/spares.py) has finished."""
        folder = self.worktree_root / epic
        deadline = time.monotonic() + timeout
        while (folder / "_trash").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return sorted(p.name for p in folder.iterdir())


def types(events: list[Envelope]) -> Iterator[str]:
    return (e.event.type for e in events)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=30)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
