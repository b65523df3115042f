"""Approve before merge from the editor, end to end (docs/answers.md: `merge`): a run launched with
`flow.launchEpic {pauseOn: ["merge"]}` stops its finished story `ready`; the editor hears
`flow/attention` with `approve`, sends a review comment (`flow.addRevision`) that sends the story
back, then `flow.answer approve`, and the story merges. A real `flowd serve`, a real detached
`flowd run`, the bundled scripted agent, real git."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException

from tests.engine.scenario import Scenario, coder, git, story
from tests.server.conftest import CONFIG, FlowClient, command, initialize
from tests.server.demo_repo import kill_runs
from tests.server.test_runs import run_status

BANG = {"when": {"role": "coder", "story": "a", "prompt": "add a bang"}, "writes": {"a.txt": "hello!\n"}}


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [BANG, coder("a", {"a.txt": "hello\n"})])
    yield sc.repo
    kill_runs(sc.repo)


@pytest_lsp.fixture(config=CONFIG)
async def editor(lsp_client: FlowClient, repo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, repo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


def lane_status(client: FlowClient, run_id: str, lane: str) -> str | None:
    lanes = [p for p in client.of("flow/lane") if p["runId"] == run_id and p["lane"] == lane]
    return lanes[-1]["status"] if lanes else None


async def test_request_changes_then_approve_from_the_editor(editor: FlowClient, repo: Path) -> None:
    client = editor
    launched = await command(client, "flow.launchEpic", {"plan": "ep.epic.json", "pauseOn": ["merge"]})
    run_id = launched["runId"]

    def asked() -> list[dict[str, Any]]:
        return [a for a in client.of("flow/attention") if a["runId"] == run_id and a["reason"] == "paused"]

    first = (await client.until(asked, 90, "the approval attention"))[0]
    assert first["lane"] == "a" and first["actions"] == ["approve"] and "ready to merge" in first["message"]
    await client.until(lambda: lane_status(client, run_id, "a") == "ready", 30, "lane a ready")
    await client.until(lambda: run_status(client, run_id) == "paused", 30, "run status paused")

    with pytest.raises(JsonRpcException) as refused:
        await command(client, "flow.answer", {"runId": run_id, "story": "a", "answer": " "})
    assert refused.value.code == -32602

    worktree = repo.parent / "worktrees" / "ep" / "a"
    uri = (worktree / "a.txt").as_uri() if worktree.exists() else "a.txt"
    sent = await command(
        client,
        "flow.addRevision",
        {"runId": run_id, "story": "a", "uri": uri, "line": 1, "text": "add a bang"},
    )
    assert "asks for approval again" in sent["message"]
    await client.until(lambda: len(asked()) >= 2, 120, "asked again after the comment")
    approved = await command(client, "flow.answer", {"runId": run_id, "story": "a", "answer": "approve"})
    assert "merges next" in approved["message"]
    await client.until(lambda: run_status(client, run_id) == "done", 120, "the run done")
    assert git(repo, "show", "epic/ep:a.txt") == "hello!\n"
    cleared = [a for a in client.of("flow/attention") if a["runId"] == run_id and a["reason"] == "cleared"]
    assert len(cleared) == 2
