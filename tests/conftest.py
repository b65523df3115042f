"""Isolation every test gets, so the suite can run in parallel (`make pytest` uses pytest-xdist,
see README.md, "Quick start") and next to other checkouts' runs on the same machine."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.agents.script_counts import STATE_ENV
from flowd.vcs import incoming

_session_state: Path | None = None
# Every `flowd serve` of this session (of this xdist worker) finds its daemon in a fresh runtime
# directory, so the daemons tests start are found, and stopped, after each test. Set on import:
# the server fixtures build their environment when their conftest is imported, which may come
# before `pytest_configure`.
_runtime: Path | None = Path(tempfile.mkdtemp(prefix="flowd-runtime-"))
os.environ["XDG_RUNTIME_DIR"] = str(_runtime)


def stop_daemons(runtime: Path) -> None:
    """End every daemon whose info file is in `runtime`'s `flowd/` (each test's daemons go with it)."""
    pids = []
    for info in (runtime / "flowd").glob("daemon-*.json"):
        try:
            pid = int(json.loads(info.read_text())["pid"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if b"flowd.server.daemon" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            pids.append(pid)
    deadline = time.monotonic() + 5
    for pid in pids:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pytest_configure(config: pytest.Config) -> None:
    """The scripted agent's `times` counts of this session (of this xdist worker) live in a fresh
    directory: processes started with an environment built at import time (the server fixtures'
    `SERVER_ENV`) inherit it. Without it they share `$TMPDIR/flowd-script-state` with every other
    session, where a reused temp path and run id find a count already spent."""
    global _session_state
    if os.environ.get(STATE_ENV) is None:
        _session_state = Path(tempfile.mkdtemp(prefix="flowd-script-state-"))
        os.environ[STATE_ENV] = str(_session_state)


def pytest_unconfigure(config: pytest.Config) -> None:
    global _session_state, _runtime
    if _runtime is not None:
        stop_daemons(_runtime)
        shutil.rmtree(_runtime, ignore_errors=True)
        _runtime = None
    if _session_state is not None:
        os.environ.pop(STATE_ENV, None)
        shutil.rmtree(_session_state, ignore_errors=True)
        _session_state = None


@pytest.fixture(autouse=True)
def _script_state_per_test(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each test counts its scripted agents' `times` on its own (outside its tmp_path, which is
    often a repository that must stay clean). Tests that set the variable themselves still win."""
    monkeypatch.setenv(STATE_ENV, str(tmp_path_factory.mktemp("script-state")))
    yield
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        stop_daemons(Path(runtime))
    incoming.end_ready()  # the gits a take-in in this process started for the next one


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` (tens of seconds each) go first, the rest keep their order. xdist's
    `load` scheduling deals the first tests round-robin, so the long ones start at once on
    different workers rather than one of them starting last and ending the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
