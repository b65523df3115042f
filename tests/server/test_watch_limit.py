"""Out of inotify watches, a story's worktree is polled, not dropped: a stray write is still flagged,
and the editor hears once that the story is polled (docs/performance.md, "Watching many lanes").

Two ways to run out: the budget the server believes (`FLOWD_INOTIFY_WATCHES`, read before each
watch), and a real limit, lowered in a user namespace of its own (`unshare -r`, where the kernel
allows it) while the budget says plenty: there the kernel's ENOSPC is what the server meets.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig

from tests.server.conftest import (
    CONFIG,
    SERVER_ENV,
    FlowClient,
    command,
    git,
    initialize,
    make_client,
    stop_client,
)
from tests.server.demo_repo import hold, kill_runs, sample
from tests.server.test_live import _diag, _exists
from tests.server.test_runs import lane_status

# The worktree holds more directories than either limit below leaves room for.
DIRS = 60
NS_LIMIT = 40  # the runs directory and the appearance watches fit in it, a worktree does not


def _userns_limit_settable() -> bool:
    probe = ["unshare", "-r", "sh", "-c", "echo 1 > /proc/sys/user/max_inotify_watches"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _config(how: str) -> ClientServerConfig:
    if how == "budget":
        env = {**SERVER_ENV, "FLOWD_INOTIFY_WATCHES": "50"}
        return ClientServerConfig(
            server_command=CONFIG.server_command, client_factory=make_client, server_env=env
        )
    script = f'echo {NS_LIMIT} > /proc/sys/user/max_inotify_watches && exec "$0" -m flowd serve'
    return ClientServerConfig(
        server_command=["unshare", "-r", "sh", "-c", script, sys.executable],
        client_factory=make_client,
        server_env={**SERVER_ENV, "FLOWD_INOTIFY_WATCHES": str(2**31 - 1)},
    )


@pytest.fixture
def wide_repo(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The demo with DIRS more directories to watch, core's first coder turn held until the test
    creates the returned file: core's lane stays active while its polled worktree is checked."""
    release = tmp_path / "release-core"

    def tune(rules: list[dict[str, Any]]) -> None:
        hold(rules, "coder", "core", release)

    root, _ = sample(tmp_path / "calc", tune)
    for i in range(DIRS):
        (root / "assets" / f"d{i:02}").mkdir(parents=True)
        (root / "assets" / f"d{i:02}" / "keep.txt").write_text(f"{i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "assets")
    yield root, release
    release.touch()
    kill_runs(root)


def _polled(client: FlowClient, lane: str) -> list[str]:
    return [m.message for m in client.messages if f"story '{lane}'" in m.message and "is polled" in m.message]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["budget", "namespace"])
async def test_a_worktree_past_the_watch_limit_is_polled_and_said_once(
    wide_repo: tuple[Path, Path], how: str
) -> None:
    repo, _ = wide_repo
    if how == "namespace" and not _userns_limit_settable():
        pytest.skip("this kernel does not let an unprivileged user namespace set its inotify limit")
    client = await _config(how).start()
    assert isinstance(client, FlowClient)
    try:
        await initialize(client, repo)
        run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
        worktree = repo.parent / "calc.flowd" / "calc" / "core"
        await _exists(worktree / "calc")
        await client.until(lambda: _polled(client, "core"), 30, "the polling message")
        assert lane_status(client, run_id, "core") == "active"
        (worktree / "NOTES.txt").write_text("the user's hand edit\n")

        uri = (worktree / "NOTES.txt").as_uri()
        found = await client.until(
            lambda: _diag(client, uri, "perimeter.outside"), 30, "the stray write flagged"
        )
        assert found[0].message == "story 'core' changed NOTES.txt, outside its perimeter"
        said = _polled(client, "core")
        assert len(said) == 1, said
        expected = "inotify ran out of watches" if how == "namespace" else "inotify watches and"
        assert expected in said[0]
        assert all(m.type == lsp.MessageType.Warning for m in client.messages)
        await asyncio.wait_for(client.shutdown_session(), 10)
    finally:
        await stop_client(client)
