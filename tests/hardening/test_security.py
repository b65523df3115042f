"""Security: plan paths that escape the repository are refused before anything is touched; an agent's
environment holds only the base variables and what the roster gives it; roster secrets never reach
traces, reports, state or logs; `flowd serve --tcp` listens on the loopback interface only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.engine.scenario import FLOWD, Scenario, coder, git, kill_group, story
from tests.server.tcp_serve import serve_tcp

ROSTER_SECRET = "sk-roster-7f3a9c-DO-NOT-LEAK"
FLOWD_SECRET = "planted-in-flowds-own-env-51e2"


@pytest.mark.parametrize(
    ("owned", "why"),
    [
        (["../outside/"], "'..'"),
        (["/etc/passwd"], "absolute"),
        (["src/../../x"], "'..'"),
        ([""], "empty"),
    ],
)
def test_plan_paths_that_escape_the_repository_are_refused(
    tmp_path: Path, owned: list[str], why: str
) -> None:
    sc = Scenario.create(tmp_path, [story("a", owned), story("b", ["b.txt"])], [coder("b", {"b.txt": "b"})])
    validate = subprocess.run(
        [*FLOWD, "plan", "validate", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True
    )
    assert validate.returncode == 2, validate.stdout + validate.stderr
    out = validate.stdout + validate.stderr
    assert "Traceback" not in out and "a" in out and why.strip("'") in out
    run = subprocess.run([*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert not (sc.repo / ".flow" / "runs").exists() and not sc.worktree_root.exists()
    assert git(sc.repo, "branch").split() == ["*", "main"]


def test_the_agent_env_has_the_rosters_key_and_no_secret_of_flowd_and_no_secret_leaks(tmp_path: Path) -> None:
    rules = [
        coder("probe", {"probe/ok.txt": "ok\n"}, run=["env > probe/env.txt"]),
        # A chatty agent that fails: its error text must not carry the env either.
        {"when": {"role": "coder", "story": "noisy"}, "times": 1, "fail": "error", "reply": "boom"},
        coder("noisy", {"noisy.txt": "n\n"}),
    ]
    sc = Scenario.create(
        tmp_path,
        [story("probe", ["probe/"]), story("noisy", ["noisy.txt"])],
        rules,
    )
    roster = sc.repo / ".flow" / "roster.toml"
    roster.write_text(
        roster.read_text(encoding="utf-8") + 'env = { AGENT_KEY = "${FLOWD_TEST_KEY}" }\n', encoding="utf-8"
    )
    env = {
        **os.environ,
        "FLOWD_TEST_KEY": ROSTER_SECRET,
        "PLANTED_SECRET": FLOWD_SECRET,
        "FLOWD_SCRIPT_STATE": str(tmp_path / "script-state"),
    }
    run = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--json"], cwd=sc.repo, env=env, capture_output=True, timeout=120
    )
    assert run.returncode in (0, 1), run.stderr.decode()
    seen = dict(
        line.split("=", 1)
        for line in git(sc.repo, "show", "epic/ep:probe/env.txt").splitlines()
        if "=" in line
    )
    assert seen["AGENT_KEY"] == ROSTER_SECRET  # the roster's ${VAR}, expanded
    assert "PLANTED_SECRET" not in seen and "FLOWD_TEST_KEY" not in seen
    assert FLOWD_SECRET not in json.dumps(seen)
    # Every file flowd wrote: state, traces, reports, gate and agent logs, the worktree root's logs.
    status = subprocess.run(
        [*FLOWD, "status", "--json"], cwd=sc.repo, env=env, capture_output=True, timeout=60
    )
    written = [p for p in (sc.repo / ".flow").rglob("*") if p.is_file()]
    written += [p for p in sc.worktree_root.rglob("*.log") if p.is_file()]
    assert any(p.name == "trace.jsonl" for p in written) and any(p.suffix == ".log" for p in written)
    hits = [str(p) for p in written if ROSTER_SECRET.encode() in p.read_bytes()]
    hits += ["run --json stdout"] if ROSTER_SECRET.encode() in run.stdout + run.stderr else []
    hits += ["status --json"] if ROSTER_SECRET.encode() in status.stdout + status.stderr else []
    assert hits == []


def test_serve_over_tcp_listens_on_loopback_only(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}  # its token file stays in the test's dir
    server, _, _ = serve_tcp(tmp_path, env, port)
    try:
        listening = [
            line.split()[1]
            for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
            if line.split()[3] == "0A" and int(line.split()[1].split(":")[1], 16) == port
        ]
        assert listening == [f"0100007F:{port:04X}"]  # 127.0.0.1, and nothing on 0.0.0.0
    finally:
        kill_group(server)
    exposed = subprocess.run(
        [*FLOWD, "serve", "--tcp", "--host", "0.0.0.0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert exposed.returncode == 2 and "loopback" in exposed.stderr and "Traceback" not in exposed.stderr
