"""No confined lane reaches the daemon: it cannot read the daemon's info file (the socket's name,
the page's token) and a connection from it is refused, by the kernel's abstract-socket scope where
the lane has it and by the daemon's check of its peer (docs/editors.md, "Who may connect")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.daemon import client, place
from flowd.sandbox import landlock
from flowd.sandbox.confine import Confinement
from tests.daemon.pipe_client import PipeClient

PROBE = r"""
import json, socket, sys
info_path, name = sys.argv[1], sys.argv[2]
out = {}
try:
    open(info_path).read()
    out["info"] = "read"
except OSError as exc:
    out["info"] = type(exc).__name__
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0" + name)
    s.sendall(json.dumps({"kind": "rpc", "version": "0"}).encode() + b"\n")
    s.sendall(json.dumps({"id": 1, "method": "cancel", "params": {"runId": "x"}}).encode() + b"\n")
    lines = s.makefile("rb")
    out["hello"] = lines.readline().decode()
    out["answer"] = lines.readline().decode()
except OSError as exc:
    out["connect"] = type(exc).__name__
if len(sys.argv) > 3:  # the page: without its token, which the lane cannot read
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[3]), timeout=10)
    try:
        conn.request("GET", "/rpc")
        out["page"] = conn.getresponse().status
    except OSError as exc:
        out["page"] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture
def lane_home(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A repository with a story worktree, and a home whose `~/.cache/flowd/daemon/` holds its
    daemon (no XDG_RUNTIME_DIR): the daemon is stopped at the end."""
    assert landlock.abi() >= 1, "these tests need the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# r\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    wt = tmp_path / "repo.flowd" / "ep" / "a"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/a", str(wt)], cwd=repo, check=True)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["HOME"] = str(home)
    yield repo.resolve(), wt, env
    for info in (home / ".cache" / "flowd" / "daemon").glob("daemon-*.json"):
        pid = int(json.loads(info.read_text())["pid"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def test_a_confined_lane_can_neither_read_the_daemons_info_nor_talk_to_it(
    lane_home: tuple[Path, Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, wt, env = lane_home
    for key in ("XDG_RUNTIME_DIR",):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", env["HOME"])
    editor = PipeClient(repo, env=env)
    try:
        editor.initialize()
        web = subprocess.run(
            [sys.executable, "-m", "flowd", "web", "--no-open"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
        )
        port = web.stdout.strip().splitlines()[-1].split(":")[2].split("/")[0]
        info_file = place.info_path(repo)
        name = json.loads(info_file.read_text())["socket"]
        home = Path(env["HOME"])
        confinement = Confinement(
            "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=wt.parents[1], epic="ep",
            home=home, allow_read=[], allow_write=[],
        )  # fmt: skip
        with confinement.spawn(wt, None, None) as confined:
            done = subprocess.run(
                confined.argv([sys.executable, "-c", PROBE, str(info_file), name, port]),
                cwd=wt, env={**env, **confined.env}, pass_fds=confined.pass_fds,
                preexec_fn=confined.preexec_fn, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        probe = json.loads(done.stdout.strip().splitlines()[-1])
        assert probe["info"] == "PermissionError"
        # Refused by the kernel (Landlock's abstract-socket scope) or, without it, by the daemon.
        assert "connect" in probe or "no_new_privs" in json.loads(probe["hello"])["error"], probe
        assert "connect" in probe or probe["answer"] == "", probe  # and closed
        # The page: refused without the token (or the connection itself refused by the kernel).
        assert probe["page"] in (403, "PermissionError", "ConnectionRefusedError"), probe
        # The same probe outside the lane reads the file and is answered.
        outside = subprocess.run(
            [sys.executable, "-c", PROBE, str(info_file), name],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        answer = json.loads(json.loads(outside.stdout)["answer"])
        assert json.loads(outside.stdout)["info"] == "read" and "unknown run" in answer["error"]["message"]
        assert client.hello(repo, "status") is not None
    finally:
        editor.close()
