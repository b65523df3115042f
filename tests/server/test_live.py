"""Live behaviour of a running epic as the editor sees it: perimeter diagnostics from a story's
first attempt, a repair that says what it undid, and bad input that never stops the server."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from tests.server.conftest import CONFIG, FlowClient, command, initialize, request, stop_client
from tests.server.demo_repo import delay, kill_runs, sample
from tests.server.test_runs import lane_status, run_status


@pytest.fixture
def held_repo(tmp_path: Path) -> Iterator[Path]:
    """The demo with core's first coder turn held for 6 s: its worktree exists, its lane is active."""

    def tune(rules: list[dict[str, Any]]) -> None:
        delay(rules, "coder", "core", 6000)

    root, _ = sample(tmp_path / "calc", tune)
    yield root
    kill_runs(root)


@pytest_lsp.fixture(config=CONFIG)
async def live(lsp_client: FlowClient, held_repo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, held_repo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


def _diag(client: FlowClient, uri: str, code: str) -> list[lsp.Diagnostic]:
    return [d for d in client.diagnostics.get(uri, ()) if d.code == code]


async def _exists(path: Path, timeout: float = 30) -> None:
    async def loop() -> None:
        while not path.exists():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(loop(), timeout)


@pytest.mark.slow
async def test_a_stray_write_in_a_first_attempt_is_flagged_live_and_its_repair_said(
    live: FlowClient, held_repo: Path
) -> None:
    client = live
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    worktree = held_repo.parent / "calc.flowd" / "calc" / "core"
    # The very first attempt: no resume, no status change after the worktree appeared.
    await _exists(worktree / "calc")
    assert lane_status(client, run_id, "core") == "active"
    (worktree / "NOTES.txt").write_text("the user's hand edit\n")

    at_worktree = (worktree / "NOTES.txt").as_uri()
    mirror = (held_repo / "NOTES.txt").as_uri()
    found = await client.until(lambda: _diag(client, at_worktree, "perimeter.outside"), 20, "live diagnostic")
    assert found[0].message == "story 'core' changed NOTES.txt, outside its perimeter"
    assert found[0].severity == lsp.DiagnosticSeverity.Error and found[0].source == "flowd"
    mirrored = await client.until(lambda: _diag(client, mirror, "perimeter.outside"), 10, "mirror")
    assert mirrored[0].related_information is not None
    assert mirrored[0].related_information[0].location.uri == at_worktree

    # The repair puts NOTES.txt back before core merges: an attention says so, diagnostics go.
    repaired = await client.until(
        lambda: [a for a in client.of("flow/attention") if a["lane"] == "core"], 60, "repair attention"
    )
    findings = ".flow/epics/calc/stories/core.findings.md"
    assert repaired == [
        {
            "runId": run_id,
            "lane": "core",
            "reason": "repaired",
            "message": "story 'core': the perimeter repair restored 1 path(s) from epic/calc, undoing "
            f"their changes in its worktree: NOTES.txt (outside) (see {findings})",
            "actions": [],
            "paths": ["NOTES.txt"],
        }
    ]
    await client.until(lambda: not _diag(client, mirror, "perimeter.outside"), 30, "mirror cleared")
    await client.until(lambda: run_status(client, run_id) == "done", 90, "run done")
    assert "NOTES.txt (outside)" in (held_repo / findings).read_text()


async def test_bad_input_gets_one_message_and_the_run_goes_on(live: FlowClient, held_repo: Path) -> None:
    client = live
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    await client.until(lambda: lane_status(client, run_id, "core") == "active", 30, "core active")

    for name, argument, wanted in [
        ("flow.cancelEpic", {"runId": "nope"}, "flow.cancelEpic: runId: "),
        ("flow.resumeEpic", {"runId": "nope"}, "flow.resumeEpic: runId: unknown run 'nope'"),
        ("flow.launchEpic", {"plan": str(held_repo / "gone.epic.json")}, "no such plan file"),
    ]:
        with pytest.raises(JsonRpcException) as caught:
            await command(client, name, argument)
        assert caught.value.code == -32602 and wanted in caught.value.message, caught.value.message
        assert "\n" not in caught.value.message and "Traceback" not in caught.value.message

    # A story worktree deleted by hand: the server keeps serving, the run goes on to its end.
    worktree = held_repo.parent / "calc.flowd" / "calc" / "core"
    await _exists(worktree / "calc")
    # As `rm -rf` by hand: the run's agent and flowd may write in it meanwhile, so again until gone.
    for _ in range(50):
        shutil.rmtree(worktree, ignore_errors=True)
        if not worktree.exists():
            break
        await asyncio.sleep(0.1)
    assert not worktree.exists(), f"{worktree} kept coming back"
    status = await request(client, "flow/status", {})
    assert [r.runId for r in status.runs] == [run_id]
    await client.until(lambda: run_status(client, run_id) in ("done", "failed"), 90, "the run to end")
    assert (await request(client, "flow/status", [])).runs[0].status == run_status(client, run_id)


@pytest.mark.slow
@pytest.mark.timeout(300)  # its own waits (30 s + 90 s + the exits' 30 s each) decide, not the default 120 s
async def test_a_client_that_disconnects_mid_run_leaves_the_run_going(held_repo: Path) -> None:
    first = await CONFIG.start()
    assert isinstance(first, FlowClient)
    try:
        await initialize(first, held_repo, "neovim")
        run_id = (await command(first, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
        await first.until(lambda: lane_status(first, run_id, "core") == "active", 30, "core active")
    finally:
        # No shutdown, no exit: the editor just goes away (its end of the pipe closes).
        server = first._server  # type: ignore[attr-defined]
        assert server is not None and server.stdin is not None
        server.stdin.close()
        await stop_client(first)
    assert server.returncode is not None

    second = await CONFIG.start()
    assert isinstance(second, FlowClient)
    try:
        await initialize(second, held_repo)
        await second.until(lambda: run_status(second, run_id) == "done", 90, "the run to finish")
        await asyncio.wait_for(second.shutdown_session(), 10)
    finally:
        await stop_client(second)
