"""End to end: a review comment from the editor (`flow.addRevision`) becomes a revision task for a
story of a run the editor launched; bad params answer -32602, refusals one sentence (-32803).

A real `flowd serve`, a real detached `flowd run`, the scripted agent and real git. The coder's
first turns wait for files the test creates, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException

from flowd.base import jsonl
from tests.engine.scenario import Scenario, git
from tests.engine.test_review_comments import two_stories
from tests.server.conftest import CONFIG, FlowClient, command, initialize
from tests.server.demo_repo import kill_runs

REQUEST_FAILED = -32803


def trace(repo: Path, run_id: str) -> list[dict[str, Any]]:
    path = repo / ".flow" / "runs" / run_id / "trace.jsonl"
    return [jsonl.loads(line)["event"] for line in path.read_bytes().splitlines() if line.strip()]


def has(repo: Path, run_id: str, kind: str, lane: str) -> bool:
    path = repo / ".flow" / "runs" / run_id / "trace.jsonl"
    return path.exists() and any(e["type"] == kind and e.get("lane") == lane for e in trace(repo, run_id))


@pytest.fixture
def scenario(tmp_path: Path) -> Any:
    made = two_stories(tmp_path, tmp_path / "go-a", tmp_path / "go-b")
    yield made
    kill_runs(made.repo)


@pytest_lsp.fixture(config=CONFIG)
async def vsc(lsp_client: FlowClient, scenario: Scenario) -> AsyncIterator[FlowClient]:
    await initialize(lsp_client, scenario.repo)
    yield lsp_client
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


async def add(client: FlowClient, **args: Any) -> Any:
    return await command(client, "flow.addRevision", args)


async def refused(client: FlowClient, code: int, **args: Any) -> str:
    with pytest.raises(JsonRpcException) as caught:
        await add(client, **args)
    assert caught.value.code == code, caught.value
    message = str(caught.value.message)
    assert message.startswith("flow.addRevision: ") and "\n" not in message
    return message


async def test_a_comment_in_the_story_worktree_becomes_its_next_task(
    vsc: FlowClient, scenario: Scenario
) -> None:
    client, repo = vsc, scenario.repo
    run_id = (await command(client, "flow.launchEpic", {"plan": str(scenario.plan_path)}))["runId"]
    await client.until(lambda: has(repo, run_id, "TaskStarted", "a"), 60, "story a's first task")
    in_worktree = scenario.worktree_root / "ep" / "a" / "a.txt"
    taken = await add(client, runId=run_id, story="a", uri=in_worktree.as_uri(), line=1, text="make it loud")
    assert taken == {
        "runId": run_id,
        "story": "a",
        "path": "a.txt",
        "line": 1,
        "message": "Story a takes the revision on a.txt:1 next, after its current task.",
    }

    # Bad params: -32602 naming the field; the run is never asked.
    assert "line" in await refused(client, -32602, runId=run_id, story="a", uri="a.txt", line=0, text="x")
    assert "text" in await refused(client, -32602, runId=run_id, story="a", uri="a.txt", line=1)
    assert "unknown run 'nope'" in await refused(
        client, -32602, runId="nope", story="a", uri="a.txt", line=1, text="x"
    )
    assert "in story a's worktree, not story b's" in await refused(
        client, -32602, runId=run_id, story="b", uri=in_worktree.as_uri(), line=1, text="x"
    )
    assert "not a file URI" in await refused(
        client, -32602, runId=run_id, story="a", uri="git:/a.txt?ref=HEAD", line=1, text="x"
    )
    # The run's refusals: one sentence each, nothing recorded.
    assert "has no story nope" in await refused(
        client, REQUEST_FAILED, runId=run_id, story="nope", uri="a.txt", line=1, text="x"
    )
    assert "past the end of the file" in await refused(
        client, REQUEST_FAILED, runId=run_id, story="a", uri=in_worktree.as_uri(), line=7, text="x"
    )

    (repo.parent / "go-a").touch()
    await client.until(lambda: has(repo, run_id, "StoryMerged", "a"), 120, "story a merged")
    assert "has already merged into epic/ep" in await refused(
        client, REQUEST_FAILED, runId=run_id, story="a", uri=(repo / "a.txt").as_uri(), line=1, text="x"
    )
    (repo.parent / "go-b").touch()
    await client.until(lambda: has(repo, run_id, "RunEnded", None) or None, 120, "the run's end")

    events = trace(repo, run_id)
    assert [
        (e["lane"], e["path"], e["line"], e["text"], e["by"])
        for e in events
        if e["type"] == "RevisionRequested"
    ] == [("a", "a.txt", 1, "make it loud", "editor")]
    assert [e["outcome"] for e in events if e["type"] == "RunEnded"] == ["done"]
    assert git(repo, "show", "epic/ep:a.txt") == "LOUD\n"
