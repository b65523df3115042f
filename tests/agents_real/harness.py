"""The real-agent suite's parts: the installed programs, their roster entries, a repository, a run.

Each program's entry is the one docs/roster.md gives, with the command pointed at the cached
install and the environment pointed at the model stub (the only stand-in). Each test's agents get
their own config dirs (CLAUDE_CONFIG_DIR, CODEX_HOME, a HOME for gemini) inside its temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from flowd.base.timeutil import parse_iso
from flowd.events.model import Envelope, TokensUsed
from flowd.trace.log import pid_alive, read_trace, trace_path
from tests.model_stub import LogEntry

FLOWD = [sys.executable, "-m", "flowd"]
ROOT = Path(__file__).resolve().parents[2]
INSTALL = Path(__file__).with_name("install_agents.sh")
PROGRAMS = ("claude-agent-acp", "codex-acp", "gemini", "claude-p", "codex-exec")


def install() -> dict[str, Path]:
    """package name → its install prefix (installs what the cache lacks)."""
    done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"installing the agents failed:\n{done.stderr[-3000:]}")
    found: dict[str, Path] = {}
    for line in done.stdout.splitlines():
        spec, prefix = line.split(" ", 1)
        found[spec.rsplit("@", 1)[0]] = Path(prefix)
    return found


def bin_of(installed: dict[str, Path], package: str, name: str) -> str:
    return str(installed[package] / "node_modules" / ".bin" / name)


def codex_home(where: Path, url: str) -> Path:
    """A CODEX_HOME whose config sends codex to the stub (docs/roster.md, codex entries)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.toml").write_text(
        'model_provider = "stub"\n'
        'model = "gpt-5-codex"\n'
        "[model_providers.stub]\n"
        'name = "stub"\n'
        f'base_url = "{url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n",
        encoding="utf-8",
    )
    return where


DOC = ROOT / "docs" / "roster.md"
# program → (its entry's id in docs/roster.md, npm package, installed binary)
DOC_ENTRIES = {
    "claude-agent-acp": ("claude", "@agentclientprotocol/claude-agent-acp", "claude-agent-acp"),
    "codex-acp": ("codex", "@agentclientprotocol/codex-acp", "codex-acp"),
    "gemini": ("gemini", "@google/gemini-cli", "gemini"),
    "claude-p": ("claude-cli", "@anthropic-ai/claude-code", "claude"),
    "codex-exec": ("codex-cli", "@openai/codex", "codex"),
}


def doc_entry(doc_id: str) -> dict[str, Any]:
    """The `[[executors]]` entry with id `doc_id` among docs/roster.md's TOML blocks."""
    text = DOC.read_text(encoding="utf-8")
    working = text[text.index("## Working entries") :]  # not the file format's example above it
    for block in re.findall(r"```toml\n(.*?)```", working, re.DOTALL):
        for spec in tomllib.loads(block).get("executors", []):
            if spec.get("id") == doc_id:
                return dict(spec)
    raise LookupError(f"docs/roster.md has no entry with id {doc_id!r}")


def entry(program: str, installed: dict[str, Path], url: str, home: Path) -> dict[str, Any]:
    """docs/roster.md's entry for `program`: its program swapped for the installed one, its
    `${KEY}` values for a throw-away key, and the stub's address and own config dirs added."""
    doc_id, package, binary = DOC_ENTRIES[program]
    spec = doc_entry(doc_id)
    command = list(spec["command"])
    assert Path(command[0]).name == binary, f"docs/roster.md {doc_id}: runs {command[0]}, not {binary}"
    command[0] = bin_of(installed, package, binary)
    env = {k: ("stub-key" if str(v).startswith("${") else v) for k, v in spec.get("env", {}).items()}
    if package.startswith(("@anthropic-ai", "@agentclientprotocol/claude")):
        env.update(ANTHROPIC_BASE_URL=url, CLAUDE_CONFIG_DIR=str(home / "claude"))
    elif "codex" in package:
        env.update(CODEX_HOME=str(codex_home(home / "codex", url)))
    else:
        env.update(GOOGLE_GEMINI_BASE_URL=url, GEMINI_CLI_HOME=str(home))
    return {**spec, "id": program, "command": command, "env": env, "slots": 1}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


@dataclass
class Project:
    repo: Path
    plan: Path

    @classmethod
    def create(
        cls, root: Path, executors: list[dict[str, Any]], settings: str = "", *, chain: bool = False
    ) -> Project:
        repo = root / "repo"
        repo.mkdir(parents=True)
        (repo / "README.md").write_text("# sample\n", encoding="utf-8")
        git(repo, "init", "-q", "-b", "main")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
        stories = [
            {
                "id": sid,
                "title": f"Story {sid}",
                "description": f"Build the {sid} module.",
                "owned": [f"{sid}/"],
                "dependsOn": ["alpha"] if chain and sid == "beta" else [],  # `chain`: beta after alpha
            }
            for sid in ("alpha", "beta")
        ]
        plan = repo / "ep.epic.json"
        plan.write_text(
            json.dumps({"epicId": "ep", "epic": "two stories", "stories": stories}), encoding="utf-8"
        )
        flow = repo / ".flow"
        flow.mkdir()
        project = cls(repo, plan)
        project.write_roster(executors)
        (flow / "config.toml").write_text(
            settings or "judgeRounds = 1\nmaxReviewRounds = 1\nconcurrency = 2\n", encoding="utf-8"
        )
        return project

    def write_roster(self, executors: list[dict[str, Any]]) -> None:
        lines = []
        for spec in executors:
            lines.append("[[executors]]")
            lines += [f"{key} = {toml_value(value)}" for key, value in spec.items()]
        (self.repo / ".flow" / "roster.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def env(self) -> dict[str, str]:
        """The environment flowd runs in here: the temp folder is the test's own. The agent
        programs write there when no lane gives them one (`flowd roster check`, a killed run):
        gemini leaves a report of each failed request, which must not pile up in /tmp."""
        temp = self.repo.parent / "tmp"
        temp.mkdir(exist_ok=True)
        return {**os.environ, "TMPDIR": str(temp)}

    def flowd(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLOWD, *args], cwd=self.repo, env=self.env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    def spawn(self, *args: str) -> Running:
        """`flowd run` as a real process in its own process group, output to files."""
        out = (self.repo.parent / "run.out").open("w")
        err = (self.repo.parent / "run.err").open("w")
        proc = subprocess.Popen(
            [*FLOWD, "run", str(self.plan), "--json", *args],
            cwd=self.repo,
            env=self.env(),
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        out.close()
        err.close()
        return Running(proc, self.repo.parent / "run.out", self.repo.parent / "run.err")

    def run_id(self, stdout: str) -> str:
        for line in stdout.splitlines():
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("runId"), str):
                return str(data["runId"])
        runs = sorted((self.repo / ".flow" / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
        return runs[-1].name

    def events(self, run_id: str) -> list[Envelope]:
        return list(read_trace(trace_path(self.repo, run_id)))

    def epic_files(self) -> list[str]:
        return git(self.repo, "ls-tree", "-r", "--name-only", "epic/ep").split()


@dataclass
class Running:
    """A `flowd run` process and every process seen below it while it ran."""

    proc: subprocess.Popen[str]
    out_path: Path
    err_path: Path
    seen: set[int] = field(default_factory=set)

    def wait(self, timeout: float, until: Callable[[], bool] | None = None) -> int | None:
        """Wait for the exit (or `until()`), noting its descendants every 0.2 s; None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.seen |= descendants(self.proc.pid)
            code = self.proc.poll()
            if code is not None:
                return code
            if until is not None and until():
                return None
            time.sleep(0.2)
        return None

    @property
    def out(self) -> str:
        return self.out_path.read_text(encoding="utf-8", errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        kill_all(self.seen)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (by /proc parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if pid_alive(pid)}  # zombies awaiting init count as gone


def wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pids):
            return set()
        time.sleep(0.1)
    return alive(pids)


def kill_all(pids: set[int]) -> None:
    for pid in alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# --- the trace's usage against the stub's log, turn by turn ----------------------------------------

_WINDOW = 16  # a turn's requests are among the latest unmatched ones of its model


@dataclass
class UsageMatch:
    """Each traced turn's usage (one TokensUsed per model) and the stub requests that make it up."""

    turns: list[tuple[TokensUsed, list[LogEntry]]]
    unmatched_turns: list[TokensUsed]
    unmatched_requests: list[LogEntry]


def _same_model(traced: str | None, served: str) -> bool:
    # The agents name the model as the request did, or with a suffix (`claude-sonnet-4-5[1m]`).
    return traced is not None and (traced == served or traced.startswith(served) or served.startswith(traced))


def _subset_summing(candidates: list[LogEntry], input_: int, output: int) -> list[LogEntry] | None:
    """The smallest set of `candidates` (earliest first on ties) whose input and output sum exactly."""
    for size in range(1, len(candidates) + 1):
        for chosen in combinations(candidates, size):
            if sum(e.input for e in chosen) == input_ and sum(e.output for e in chosen) == output:
                return list(chosen)
    return None


def match_usage(envelopes: list[Envelope], served: list[LogEntry]) -> UsageMatch:
    """Match every measured TokensUsed of the trace, in trace order, to the stub requests it sums:
    requests of its model, served before it and not matched yet. The agents report usage per turn
    (docs/roster.md "Usage, turn by turn"), so a turn is matched to its requests as a set."""
    left = sorted(served, key=lambda e: e.seq)
    turns: list[tuple[TokensUsed, list[LogEntry]]] = []
    unmatched: list[TokensUsed] = []
    for envelope in envelopes:
        event = envelope.event
        if not isinstance(event, TokensUsed) or event.estimated:
            continue
        until = parse_iso(envelope.at).timestamp() + 0.001  # the trace keeps milliseconds
        candidates = [e for e in left if e.at <= until and _same_model(event.model, e.model)][-_WINDOW:]
        found = _subset_summing(candidates, event.usage.input, event.usage.output)
        if found is None:
            unmatched.append(event)
            continue
        turns.append((event, found))
        left = [e for e in left if e not in found]
    return UsageMatch(turns, unmatched, left)


def run_to_end(project: Project, program: str, timeout: float = 240) -> str:
    """`flowd run` of the project to its end: exit 0 and no agent process left, or the test
    fails naming the program; the run's id."""
    run = project.spawn()
    try:
        code = run.wait(timeout)
        left = wait_gone(run.seen)
    finally:
        run.kill()
    assert code == 0, f"{program}: exit {code}\n{run.err[-4000:]}\n{run.out[-3000:]}"
    assert not left, f"{program}: agent processes left after the run: {left}"
    return project.run_id(run.out)
