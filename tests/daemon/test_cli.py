"""`flowd status`, `cost`, `answer`, `revise` and `cancel` through the repository's daemon and
without it: the same output, the same errors and exit codes (docs/editors.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flowd.daemon import client
from tests.daemon.pipe_client import PipeClient

COMMANDS = (
    ("status", "--json"),
    ("status",),
    ("cost",),
    ("cost", "--json"),
    ("cancel", "no-such-run"),
    ("answer", "no-such-run", "approve"),
    ("revise", "no-such-run", "calc", "README.md:1", "say more"),
)


def flowd(repo: Path, *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "flowd", *args], cwd=repo, capture_output=True, text=True, timeout=120,
        env=os.environ.copy(),
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_the_cli_answers_the_same_through_the_daemon(tmp_path: Path) -> None:
    repo = tmp_path / "demo"
    assert flowd(tmp_path, "demo", "--dir", str(repo))[0] == 0
    repo = repo.resolve()
    alone = {args: flowd(repo, *args) for args in COMMANDS}
    assert alone[("status", "--json")][0] == 0 and '"runs"' in alone[("status", "--json")][1]
    assert alone[("cancel", "no-such-run")][0] == 2
    assert alone[("answer", "no-such-run", "approve")][0] == 2
    editor = PipeClient(repo)
    try:
        editor.initialize()
        assert editor.request("flow/status")["result"]["runs"]
        through = {args: flowd(repo, *args) for args in COMMANDS}
        conn = client.hello(repo, "status")
        assert conn is not None
        conn.close()
    finally:
        editor.close()
    assert through == alone
    assert conn.answer["requests"] == {"status": 2, "cost": 2, "cancel": 1, "post": 2}
