"""The server sends where a run keeps its things (docs/protocol.md): the epic branch, each story's
branch, worktree and findings, the report — the names the runner used, also under a worktree root
of the project's own (`worktreeRoot`), so the editors never build them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_lsp

from tests.server.conftest import CONFIG, FlowClient, command, initialize, request
from tests.server.demo_repo import kill_runs, sample


@pytest.fixture
def far_repo(tmp_path: Path) -> Iterator[Path]:
    """The demo with its story worktrees under `<tmp>/trees`, not beside the repository."""
    root, _ = sample(tmp_path / "calc")
    config = root / ".flow" / "config.toml"
    config.write_text(config.read_text() + 'worktreeRoot = "../trees"\n')
    yield root
    kill_runs(root)


@pytest_lsp.fixture(config=CONFIG)
async def far(lsp_client: FlowClient, far_repo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, far_repo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


def last_lanes(client: FlowClient, run_id: str) -> dict[str, dict[str, object]]:
    return {p["lane"]: p for p in client.of("flow/lane") if p["runId"] == run_id}


async def test_lanes_and_runs_carry_the_runners_names_under_a_worktree_root_of_its_own(
    far: FlowClient, far_repo: Path
) -> None:
    client, repo = far, far_repo.resolve()
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    await client.until(
        lambda: any(p["runId"] == run_id and p["status"] == "done" for p in client.of("flow/run")), 90, "done"
    )
    trees = (repo.parent / "trees").resolve()
    lanes = last_lanes(client, run_id)
    assert set(lanes) == {"core", "parser", "format", "cli", "docs"}
    stories = repo / ".flow" / "epics" / "calc" / "stories"
    for story, lane in lanes.items():
        # What the runner itself recorded for the story: its worktree and branch.
        state = json.loads((stories / f"{story}.json").read_text())
        assert lane["worktree"] == str(Path(state["worktree"]).resolve()) == str(trees / "calc" / story)
        assert lane["branch"] == state["branch"] == f"story/calc/{story}"
        assert lane["findings"] == str(stories / f"{story}.findings.md")
    (run,) = [p for p in client.of("flow/run") if p["runId"] == run_id and p["status"] == "done"]
    assert run["epicBranch"] == "epic/calc"
    # The report is written as the run ends, a moment after its last event.
    for _ in range(200):
        if Path(str(run["reportMarkdown"])).is_file():
            break
        await asyncio.sleep(0.05)
    assert Path(str(run["reportMarkdown"])).is_file()
    assert Path(str(run["reportJson"])).is_file()
    assert run["reportMarkdown"] == str(repo / ".flow" / "epics" / "calc" / "report.md")

    (status,) = (await request(client, "flow/status", {})).runs
    assert (status.epicBranch, status.reportMarkdown) == ("epic/calc", run["reportMarkdown"])
    assert {lane.lane: lane.worktree for lane in status.lanes} == {s: lanes[s]["worktree"] for s in lanes}
