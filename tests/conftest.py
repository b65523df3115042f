"""Isolation every test gets, so the suite can run in parallel (`make pytest` uses pytest-xdist,
see README.md, "Quick start") and next to other checkouts' runs on the same machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.agents.script_counts import STATE_ENV

_session_state: Path | None = None


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
    global _session_state
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `slow` (tens of seconds each) go first, the rest keep their order. xdist's
    `load` scheduling deals the first tests round-robin, so the long ones start at once on
    different workers rather than one of them starting last and ending the run alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
