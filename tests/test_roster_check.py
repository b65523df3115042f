"""`flowd roster check` end to end: the real CLI, a real git repo, real agent processes.

The executors are the bundled scripted ACP agent, a cli executor replaying recorded claude output
(fixtures/agents/replay.py), and an openai executor pointing at a closed port on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from flowd.sandbox.confine import status_line

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"
REPLAY = FIXTURES / "replay.py"


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def flowd(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env_home = repo / "home"  # no user-level roster leaks in from the machine
    return subprocess.run(
        [sys.executable, "-m", "flowd", "--repo", str(repo), "roster", "check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "XDG_CONFIG_HOME": str(env_home)},
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def cli_entry(ident: str, fixture: str, *extra: str) -> str:
    command = json.dumps([sys.executable, str(REPLAY), str(FIXTURES / fixture), *extra])
    return (
        f'[[executors]]\nid = "{ident}"\nkind = "cli"\ncommand = {command}\nroles = ["coder", "reviewer"]\n'
    )


def write_roster(repo: Path, body: str) -> None:
    (repo / ".flow").mkdir(exist_ok=True)
    (repo / ".flow/roster.toml").write_text(body, encoding="utf-8")


def test_every_executor_is_checked_and_failures_are_classified(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write_roster(
        repo,
        '[[executors]]\nid = "demo"\nkind = "script"\nscript = "check.script.json"\n\n'
        + cli_entry("claude-cli", "claude_success.jsonl")
        + "\n"
        + cli_entry("claude-out", "claude_not_logged_in.jsonl", "--exit", "1")
        + "\n"
        + f'[[executors]]\nid = "local"\nkind = "openai"\nbaseUrl = "http://127.0.0.1:{closed_port()}/v1"\n'
        + 'model = "qwen2.5-coder"\nroles = ["reviewer", "judge"]\n',
    )
    (repo / ".flow/check.script.json").write_text(
        json.dumps({"model": "scripted", "rules": [{"when": {"prompt": "single word"}, "reply": "ready"}]}),
        encoding="utf-8",
    )
    done = flowd(repo, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["roster"] == str(repo / ".flow/roster.toml")
    by_id = {r["id"]: r for r in report["executors"]}
    assert by_id["demo"]["ok"] is True and by_id["demo"]["reply"] == "ready"
    assert by_id["demo"]["role"] == "planner"
    assert by_id["claude-cli"]["ok"] is True and by_id["claude-cli"]["role"] == "reviewer"
    assert by_id["claude-out"]["failure"]["kind"] == "auth"
    assert by_id["local"]["failure"]["kind"] == "unavailable"
    assert all(isinstance(r["durationMs"], int) for r in report["executors"])

    text = flowd(repo, "--role", "reviewer")
    assert text.returncode == 1
    lines = text.stdout.splitlines()
    assert lines[-2] == "2 of 4 executors answered; 2 failed"  # demo serves every role
    # The last line: the confinement a run gets here, as this kernel offers it (docs/sandbox.md).
    assert lines[-1] == status_line("enforce") and lines[-1].startswith("sandbox: ")
    assert report["sandbox"] == lines[-1]
    assert any("claude-out" in line and "failed" in line and "auth:" in line for line in lines)
    assert any(line.split()[:2] == ["demo", "ok"] and "as reviewer" in line for line in lines)


def test_all_ok_exits_zero_and_bad_input_exits_two(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write_roster(repo, cli_entry("codex", "codex_success.jsonl"))
    done = flowd(repo)
    assert done.returncode == 0, done.stderr
    assert "codex" in done.stdout and " ok " in done.stdout and "1 of 1 executors answered" in done.stdout

    assert flowd(repo, "--role", "judge").returncode == 2  # nobody serves it
    assert flowd(repo, "--role", "boss").returncode == 2
    write_roster(repo, '[[executors]]\nid = "x"\nkind = "cli"\n')
    bad = flowd(repo)
    assert bad.returncode == 2 and "roster.toml" in bad.stderr and "command" in bad.stderr
    assert "Traceback" not in bad.stderr

    # With --json a bad roster (and a role nobody serves) is a JSON error document on stdout.
    as_json = flowd(repo, "--json")
    assert as_json.returncode == 2 and "roster.toml" in as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["exitCode"] == 2 and "roster.toml" in document["error"]
    write_roster(repo, cli_entry("codex", "codex_success.jsonl"))
    nobody = flowd(repo, "--role", "judge", "--json")
    assert (
        nobody.returncode == 2 and "no executor serves the judge role" in json.loads(nobody.stdout)["error"]
    )
