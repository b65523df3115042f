"""`flow/graph` and `flow/timeline` from a real server following a real run of the demo epic
(docs/graph.md): the nodes' statuses are the ones `flow/lane` sent, the edges the plan's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException

from tests.server.conftest import CONFIG, FlowClient, _plain, command, initialize, request
from tests.server.demo_repo import kill_runs, sample
from tests.server.test_runs import lane_status, run_status

DEPENDS = {"core": [], "parser": ["core"], "format": ["core"], "cli": ["parser", "format"], "docs": []}


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Path]:
    root, _ = sample(tmp_path / "calc")
    yield root
    kill_runs(root)


@pytest_lsp.fixture(config=CONFIG)
async def served(lsp_client: FlowClient, demo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, demo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


async def ask(client: FlowClient, method: str, run_id: str) -> Any:
    return _plain(await request(client, method, {"runId": run_id}))


@pytest.mark.slow
async def test_the_graph_and_timeline_of_a_run_follow_its_lanes(served: FlowClient) -> None:
    client = served
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    await client.until(lambda: lane_status(client, run_id, "core") == "active", 60, "core active")
    live = await ask(client, "flow/graph", run_id)
    assert {s["id"]: s["dependsOn"] for s in live["stories"]} == DEPENDS
    assert {s["id"]: s["status"] for s in live["stories"]}["cli"] == "planned"

    await client.until(lambda: run_status(client, run_id) == "done", 120, "the run to finish")
    graph = await ask(client, "flow/graph", run_id)
    statuses = {s["id"]: s["status"] for s in graph["stories"]}
    assert (
        statuses
        == {story: lane_status(client, run_id, story) for story in DEPENDS}
        == dict.fromkeys(DEPENDS, "done")
    )
    for story in graph["stories"]:
        assert story["lane"] == story["id"]
        assert story["startedAt"] <= story["mergedAt"] <= story["endedAt"]
    critical = [s["id"] for s in graph["stories"] if s["critical"]]
    assert critical[0] in ("core", "docs") and (critical == ["docs"] or critical[-1] == "cli")
    # Every story landed through the merge train exactly once, in a green batch (docs/merging.md).
    landed = [lane for batch in graph["batches"] if batch.get("ok") for lane in batch["lanes"]]
    assert sorted(landed) == sorted(DEPENDS), graph["batches"]

    timeline = await ask(client, "flow/timeline", run_id)
    for lane in timeline["lanes"]:
        names = [p["phase"] for p in lane["phases"]]
        assert names[0] == "planned" and names[-1] == "merged" and "coding" in names, lane
        assert "queued" in names, lane  # its merge stage (the demo has no epic gates to be merging in)
        assert all(p["start"] <= p["end"] for p in lane["phases"]), lane


async def test_an_unknown_run_or_a_missing_run_id_is_a_32602(served: FlowClient) -> None:
    for method in ("flow/graph", "flow/timeline"):
        with pytest.raises(JsonRpcException) as bad:
            await request(served, method, {"runId": "nope"})
        assert bad.value.code == -32602 and "runId: no run 'nope'" in str(bad.value)
        with pytest.raises(JsonRpcException) as missing:
            await request(served, method, {})
        assert missing.value.code == -32602 and "runId" in str(missing.value)
