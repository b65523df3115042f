"""The repository's daemon through real `flowd serve` forwarders, as editors start them: one daemon
for racing starts, idle exit, an upgrade, a killed daemon, refusals (docs/editors.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.daemon import place
from tests.daemon.pipe_client import PipeClient

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t.invalid",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# test\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root.resolve()


@pytest.fixture
def clients() -> Iterator[list[PipeClient]]:
    started: list[PipeClient] = []
    yield started
    for c in started:
        c.close()


def flowd(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flowd", *args], cwd=repo, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def daemon_status(repo: Path) -> dict[str, object] | None:
    done = flowd(repo, "daemon", "status", "--json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def daemons_of(repo: Path) -> list[int]:
    """Every daemon process serving `repo`, from /proc (not from the daemon's own word)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"flowd.server.daemon" in argv and str(repo).encode() in argv:
                found.append(int(entry.name))
    return found


def until(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {predicate}")


def test_racing_forwarders_make_one_daemon_serving_every_session(
    repo: Path, clients: list[PipeClient]
) -> None:
    clients.extend(PipeClient(repo) for _ in range(4))
    threads = [threading.Thread(target=c.initialize) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        assert c.request("flow/status")["result"] == {"runs": []}
    assert len(daemons_of(repo)) == 1
    status = daemon_status(repo)
    assert status is not None and status["sessions"] == 4 and status["repo"] == str(repo)
    assert status["pid"] == daemons_of(repo)[0]


def test_idle_daemon_exits_after_idle_exit_s(repo: Path, clients: list[PipeClient]) -> None:
    (repo / ".flow").mkdir()
    (repo / ".flow" / "config.toml").write_text("[daemon]\nidleExitS = 1\n")
    c = PipeClient(repo)
    c.initialize()
    (pid,) = daemons_of(repo)
    time.sleep(2.5)
    assert daemons_of(repo) == [pid]  # a session keeps it
    assert c.close() == 0
    until(lambda: not daemons_of(repo))
    assert flowd(repo, "daemon", "status").returncode == 1


def test_a_newer_forwarder_replaces_the_daemon_and_the_older_session_goes_on(
    repo: Path, clients: list[PipeClient]
) -> None:
    old = PipeClient(repo, env={place.VERSION_ENV: "0.1.0"})
    clients.append(old)
    old.initialize()
    (first,) = daemons_of(repo)
    new = PipeClient(repo, env={place.VERSION_ENV: "0.2.0"})
    clients.append(new)
    new.initialize()
    new.wait_for(lambda m: m.get("method") == "window/showMessage" and "replaced" in m["params"]["message"])
    assert "ran flowd 0.1.0; it was replaced by flowd 0.2.0" in new.shown()[0]
    until(lambda: first not in daemons_of(repo))
    assert len(daemons_of(repo)) == 1
    # The older editor's session was replayed into the new daemon: it answers without a restart.
    assert old.request("flow/status")["result"] == {"runs": []}
    status = daemon_status(repo)
    assert status is not None and status["version"] == "0.2.0" and status["sessions"] == 2


def test_a_killed_daemon_is_restarted_and_the_editor_reconnects(
    repo: Path, clients: list[PipeClient]
) -> None:
    c = PipeClient(repo)
    clients.append(c)
    c.initialize()
    uri = (repo / "README.md").as_uri()
    c.send(
        {
            "method": "textDocument/didOpen",
            "params": {
                "textDocument": {"uri": uri, "languageId": "markdown", "version": 1, "text": "# test\n"}
            },
        }
    )
    (first,) = daemons_of(repo)
    os.kill(first, signal.SIGKILL)
    until(lambda: first not in daemons_of(repo) and len(daemons_of(repo)) == 1)
    assert c.request("flow/status")["result"] == {"runs": []}
    assert c.process.poll() is None
    status = daemon_status(repo)
    assert status is not None and status["sessions"] == 1


def test_daemon_stop_tells_the_sessions_and_ends(repo: Path, clients: list[PipeClient]) -> None:
    c = PipeClient(repo)
    clients.append(c)
    c.initialize()
    assert len(daemons_of(repo)) == 1
    done = flowd(repo, "daemon", "stop")
    assert done.returncode == 0 and "Stopped" in done.stdout
    until(lambda: not daemons_of(repo))
    c.wait_for(
        lambda m: m.get("method") == "window/showMessage" and "flowd daemon stop" in m["params"]["message"]
    )
    assert c.process.wait(timeout=10) == 0
    assert flowd(repo, "daemon", "status", "--json").returncode == 1


def test_a_state_directory_of_another_user_is_refused_and_the_editor_is_served_in_process(
    repo: Path, tmp_path: Path, clients: list[PipeClient]
) -> None:
    if os.getuid() != 0:
        pytest.fail("this test makes a directory of another user, which needs root (the CI runs as root)")
    runtime = tmp_path / "runtime"
    (runtime / "flowd").mkdir(parents=True)
    os.chown(runtime / "flowd", 65534, 65534)
    c = PipeClient(repo, env={"XDG_RUNTIME_DIR": str(runtime)})
    clients.append(c)
    c.initialize()
    assert c.request("flow/status")["result"] == {"runs": []}
    assert any("is not a directory of this user" in text for text in c.shown())
    assert not daemons_of(repo)
    refused = flowd(repo, "daemon", "status", env={"XDG_RUNTIME_DIR": str(runtime)})
    assert refused.returncode == 2 and "is not a directory of this user" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_no_daemon_serves_in_process(repo: Path, clients: list[PipeClient]) -> None:
    c = PipeClient(repo, args=("--no-daemon",))
    clients.append(c)
    c.initialize()
    assert c.request("flow/status")["result"] == {"runs": []}
    assert not daemons_of(repo)


def test_the_forwarders_start_imports_no_dataclasses_nor_logging() -> None:
    """Every editor reload starts a forwarder: its imports are the reload's time (docs/performance.md,
    "The repository's daemon (issue 52)"), so it keeps out `dataclasses` (with `inspect`) and `logging`."""
    code = (
        "import sys, flowd.cli, flowd.server.main, flowd.daemon.forward; "
        "print(sorted(m for m in ('dataclasses', 'inspect', 'logging') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
