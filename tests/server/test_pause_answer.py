"""Pause and ask from the editor, end to end: a run launched with `flow.launchEpic {pauseOn}`
pauses on a BLOCKED_ON, the editor hears `flow/attention` and the run's `paused` status, answers
with `flow.answer` (bad answers are -32602, one sentence), and hears `cleared` (docs/answers.md).
A real `flowd serve`, a real detached `flowd run`, the bundled scripted agent, real git."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_lsp
from pygls.exceptions import JsonRpcException

from tests.engine.scenario import Scenario, coder, story
from tests.server.conftest import CONFIG, FlowClient, command, initialize
from tests.server.demo_repo import kill_runs
from tests.server.test_runs import run_status

BLOCKED = {"reply": "Stuck.\nBLOCKED_ON: which greeting the product wants", "times": 1}
TOLD = {"when": {"role": "coder", "story": "a", "prompt": "say HOWDY"}, "writes": {"a.txt": "howdy\n"}}


@pytest.fixture
def blocked_repo(tmp_path: Path) -> Iterator[Path]:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"]), story("b", ["b.txt"])],
        [coder("a", **BLOCKED), TOLD, coder("b", {"b.txt": "b"})],
    )
    yield sc.repo
    kill_runs(sc.repo)


@pytest_lsp.fixture(config=CONFIG)
async def editor(lsp_client: FlowClient, blocked_repo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, blocked_repo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


async def test_a_blocked_story_asks_the_editor_and_its_answer_goes_on(
    editor: FlowClient, blocked_repo: Path
) -> None:
    client = editor
    launched = await command(
        client, "flow.launchEpic", {"plan": "ep.epic.json", "pauseOn": ["budget", "blocked", "noExecutor"]}
    )
    run_id = launched["runId"]

    def asked() -> list[dict[str, object]]:
        return [a for a in client.of("flow/attention") if a["runId"] == run_id and a["reason"] == "blocked"]

    attention = (await client.until(asked, 90, "the blocked attention"))[0]
    assert attention["lane"] == "a" and attention["actions"] == ["stop"]
    assert "which greeting the product wants" in attention["message"]
    await client.until(lambda: run_status(client, run_id) == "paused", 60, "run status paused")

    for args, says in [
        ({"runId": run_id, "story": "b", "answer": "hi"}, "Story b of run"),
        ({"runId": run_id, "answer": "raise 5"}, "itself is not paused"),
        ({"runId": run_id, "story": "a"}, "answer"),  # missing field
        ({"runId": "nope", "story": "a", "answer": "hi"}, "runId: No run nope"),
    ]:
        with pytest.raises(JsonRpcException) as refused:
            await command(client, "flow.answer", args)
        assert refused.value.code == -32602 and says in refused.value.message

    result = await command(client, "flow.answer", {"runId": run_id, "story": "a", "answer": "say HOWDY"})
    assert result["runId"] == run_id and "goes on" in result["message"]
    cleared = await client.until(
        lambda: [a for a in client.of("flow/attention") if a["runId"] == run_id and a["reason"] == "cleared"],
        60,
        "cleared",
    )
    assert cleared[0]["lane"] == "a" and cleared[0]["actions"] == []
    await client.until(lambda: run_status(client, run_id) == "done", 120, "the run done")
