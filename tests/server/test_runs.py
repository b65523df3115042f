"""End to end: the real engine launched from the editor, followed, cancelled, resumed, re-attached."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp

from flowd.base import jsonl
from tests.server.conftest import CONFIG, FlowClient, command, initialize, request, stop_client
from tests.server.demo_repo import delay, hold, kill_runs, sample


def trace(repo: Path, run_id: str) -> list[dict[str, Any]]:
    path = repo / ".flow" / "runs" / run_id / "trace.jsonl"
    return [jsonl.loads(line)["event"] for line in path.read_bytes().splitlines() if line.strip()]


def run_status(client: FlowClient, run_id: str) -> str | None:
    runs = [p for p in client.of("flow/run") if p["runId"] == run_id]
    return runs[-1]["status"] if runs else None


def progress_kinds(client: FlowClient) -> list[list[str]]:
    return [[type(v).__name__ for v in values] for values in client.progress_reports.values()]


def ended_progress(client: FlowClient) -> bool:
    return any(kinds and kinds[-1] == "WorkDoneProgressEnd" for kinds in progress_kinds(client))


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    root, _ = sample(tmp_path / "calc")
    yield root
    kill_runs(root)


async def test_launch_streams_lanes_tasks_clones_in_order_and_progress(
    client: FlowClient, repo: Path
) -> None:
    started = await command(client, "flow.launchEpic", {"plan": "calc.epic.json"})
    run_id = started["runId"]
    assert started["epicId"] == "calc"
    assert started["epicBranch"] == "epic/calc"
    await client.until(lambda: run_status(client, run_id) == "done", 90, "the run to finish")
    events = trace(repo, run_id)

    # Every task start and completion, in trace order.
    want_tasks = [
        (e["lane"], e["index"], "started" if e["type"] == "TaskStarted" else "completed")
        for e in events
        if e["type"] in ("TaskStarted", "TaskCompleted")
    ]
    got_tasks = [
        (t["lane"], t["index"], t["state"]) for t in client.of("flow/task") if t["state"] != "planned"
    ]
    assert got_tasks == want_tasks

    # Every lease and release, in trace order, with its clone number.
    want_clones = [
        (
            e["executor"],
            e.get("clone"),
            e["role"],
            e.get("label"),
            "leased" if "Leased" in e["type"] else "released",
        )
        for e in events
        if e["type"] in ("ExecutorLeased", "ExecutorReleased")
    ]
    got_clones = [
        (c["executor"], c.get("clone"), c["role"], c.get("label"), c["state"])
        for c in client.of("flow/clone")
    ]
    assert got_clones == want_clones
    # `clone` is on every slot lease and release; only a borrowed one (busy machines) lacks it.
    leases = [e for e in events if e["type"] in ("ExecutorLeased", "ExecutorReleased")]
    assert ["clone" in c for c in client.of("flow/clone")] == [e.get("clone") is not None for e in leases]

    # Every lane status, in order per lane; the merge train's (docs/merging.md) come between its
    # work and its merge: `queued`, then `merging` with the batch that held it.
    batches = {b: e["lanes"] for e in events if e["type"] == "MergeBatchStarted" for b in [e["batch"]]}
    for lane in client.of("flow/lane"):
        if lane["status"] == "merging":
            assert lane["lane"] in batches[lane["batch"]]
    for story in ("core", "parser", "format", "cli", "docs"):
        want = ["planned"] + [
            e["status"] for e in events if e["type"] == "StoryStatusChanged" and e["story"] == story
        ]
        got: list[str] = []
        for lane in client.of("flow/lane"):
            if lane["lane"] == story and (not got or got[-1] != lane["status"]):
                got.append(lane["status"])
        train = [s for s in got if s in ("queued", "merging")]
        assert train and train[-1] == "merging", story
        assert [s for s in got if s not in ("queued", "merging")] == want, story
    assert {lane["lane"] for lane in client.of("flow/lane")} == {"core", "parser", "format", "cli", "docs"}

    final_run = client.of("flow/run")[-1]
    assert final_run == {
        "runId": run_id,
        "epicId": "calc",
        "status": "done",
        "done": 5,
        "failed": 0,
        "skipped": 0,
        "total": 5,
        "epicBranch": "epic/calc",
        "reportMarkdown": str(repo.resolve() / ".flow" / "epics" / "calc" / "report.md"),
        "reportJson": str(repo.resolve() / ".flow" / "epics" / "calc" / "report.json"),
    }
    cost = client.of("flow/cost")[-1]
    assert cost["runId"] == run_id and cost["tokens"] > 0

    # One work-done progress: begin "Epic calc", reports, end.
    await client.until(lambda: ended_progress(client), 10, "progress end")
    (values,) = client.progress_reports.values()
    assert isinstance(values[0], lsp.WorkDoneProgressBegin) and values[0].title == "Epic calc"
    assert any(
        isinstance(v, lsp.WorkDoneProgressReport) and v.message == "5/5 stories · 0 lanes" for v in values
    )
    assert isinstance(values[-1], lsp.WorkDoneProgressEnd) and values[-1].message.startswith("done")

    status = await request(client, "flow/status", {})
    (run,) = status.runs
    assert (run.runId, run.epicId, run.status, len(run.lanes)) == (run_id, "calc", "done", 5)
    report = await request(client, "flow/costReport", {"runId": run_id})
    assert report.runs == 1 and report.requests > 0


@pytest_lsp.fixture(config=CONFIG)
async def vsc(lsp_client: FlowClient, slow_repo: Path) -> AsyncIterator[None]:
    await initialize(lsp_client, slow_repo)
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


@pytest.fixture
def slow_repo(tmp_path: Path) -> Iterator[Path]:
    """The demo with its lanes held open: core's coder and docs' second coder turn wait 3 s."""

    def tune(rules: list[dict[str, Any]]) -> None:
        delay(rules, "coder", "core", 3000)
        delay(rules, "coder", "docs", 3000, last=True)

    root, _ = sample(tmp_path / "calc", tune)
    yield root
    kill_runs(root)


def lane_status(client: FlowClient, run_id: str, story: str) -> str | None:
    lanes = [p for p in client.of("flow/lane") if p["runId"] == run_id and p["lane"] == story]
    return lanes[-1]["status"] if lanes else None


@pytest.mark.slow
async def test_cancel_then_resume(vsc: FlowClient, slow_repo: Path) -> None:
    client = vsc
    run_id = (await command(client, "flow.launchEpic", {"plan": str(slow_repo / "calc.epic.json")}))["runId"]
    await client.until(lambda: lane_status(client, run_id, "core") == "active", 30, "core active")
    cancelled = await command(client, "flow.cancelEpic", {"runId": run_id})
    assert cancelled == {"runId": run_id, "outcome": "cancelled"}
    await client.until(lambda: run_status(client, run_id) == "cancelled", 30, "cancelled run")

    resumed = await command(client, "flow.resumeEpic", {"runId": run_id})
    assert resumed["runId"] != run_id and resumed["epicId"] == "calc"
    await client.until(lambda: run_status(client, resumed["runId"]) == "done", 90, "resumed run done")
    status = await request(client, "flow/status", {})
    assert [r.status for r in status.runs] == ["done", "cancelled"]


@pytest.fixture
def held_repo(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The demo with core's first coder turn held until the test creates the returned file: the
    run is certainly still running when a restarted server re-attaches, however slowly a loaded
    machine starts it (with a fixed delay the run could end first, and `running` never shows)."""
    release = tmp_path / "release-core"

    def tune(rules: list[dict[str, Any]]) -> None:
        hold(rules, "coder", "core", release)

    root, _ = sample(tmp_path / "calc", tune)
    yield root, release
    release.touch()
    kill_runs(root)


async def test_restart_mid_run_reattaches(held_repo: tuple[Path, Path]) -> None:
    slow_repo, release = held_repo
    first = await CONFIG.start()
    assert isinstance(first, FlowClient)
    try:
        await initialize(first, slow_repo)
        run_id = (await command(first, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
        await first.until(lambda: lane_status(first, run_id, "core") == "active", 30, "core active")
        await asyncio.wait_for(first.shutdown_session(), 10)
    finally:
        await stop_client(first)

    second = await CONFIG.start()
    assert isinstance(second, FlowClient)
    try:
        await initialize(second, slow_repo, "neovim")
        # The snapshot of the running run, then its live events, then its end.
        await second.until(lambda: run_status(second, run_id) == "running", 20, "re-attached run")
        release.touch()
        await second.until(lambda: run_status(second, run_id) == "done", 90, "run done after re-attach")
        assert {lane["lane"] for lane in second.of("flow/lane")} == {
            "core",
            "parser",
            "format",
            "cli",
            "docs",
        }
        await second.until(lambda: ended_progress(second), 10, "progress end")
        assert progress_kinds(second)[0][0] == "WorkDoneProgressBegin"
        await asyncio.wait_for(second.shutdown_session(), 10)
    finally:
        await stop_client(second)


def _diag(client: FlowClient, uri: str, code: str) -> list[lsp.Diagnostic]:
    return [d for d in client.diagnostics.get(uri, ()) if d.code == code]


async def test_perimeter_outside_appears_live_and_clears_after_restore(
    vsc: FlowClient, slow_repo: Path
) -> None:
    client = vsc
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    worktree_readme = (slow_repo.parent / "calc.flowd" / "calc" / "docs" / "README.md").as_uri()
    mirror = (slow_repo / "README.md").as_uri()
    found = await client.until(
        lambda: _diag(client, worktree_readme, "perimeter.outside"), 30, "perimeter.outside"
    )
    assert found[0].severity == lsp.DiagnosticSeverity.Error and found[0].source == "flowd"
    assert "docs" in found[0].message and "README.md" in found[0].message
    mirrored = await client.until(
        lambda: _diag(client, mirror, "perimeter.outside"), 10, "mirrored diagnostic"
    )
    assert (
        mirrored[0].related_information and mirrored[0].related_information[0].location.uri == worktree_readme
    )

    listed = await request(client, "flow/perimeter", {})
    assert [(v.uri, v.story, v.runId, v.code) for v in listed.violations] == [
        (worktree_readme, "docs", run_id, "perimeter.outside")
    ]
    # The engine restores README.md before merging docs: both diagnostics go.
    await client.until(
        lambda: (
            not _diag(client, worktree_readme, "perimeter.outside")
            and not _diag(client, mirror, "perimeter.outside")
        ),
        60,
        "diagnostics cleared after restore",
    )
    await client.until(lambda: run_status(client, run_id) == "done", 90, "run done")


async def test_user_edit_of_a_path_a_running_story_owns(vsc: FlowClient, slow_repo: Path) -> None:
    client = vsc
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    await client.until(lambda: lane_status(client, run_id, "core") == "active", 30, "core active")
    path = slow_repo / "calc" / "core.py"
    uri = path.as_uri()
    owner = await request(client, "flow/perimeter", {"uri": uri})
    assert owner.path == "calc/core.py"
    assert (owner.owner.story, owner.owner.runId, owner.owner.status) == ("core", run_id, "active")
    shared = await request(client, "flow/perimeter", {"uri": (slow_repo / "calc" / "__init__.py").as_uri()})
    assert "core" in shared.sharedReadOnlyBy

    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text="")
        )
    )
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text="def add(a, b): ...\n")],
        )
    )
    found = await client.until(
        lambda: _diag(client, uri, "perimeter.ownedByRunningStory"), 10, "owned warning"
    )
    assert found[0].severity == lsp.DiagnosticSeverity.Warning
    assert "core" in found[0].message
    # Once core is done (merged), the warning goes.
    await client.until(lambda: lane_status(client, run_id, "core") == "done", 60, "core done")
    await client.until(lambda: not _diag(client, uri, "perimeter.ownedByRunningStory"), 10, "warning cleared")


async def test_cancel_from_the_progress_ui_cancels_the_run(vsc: FlowClient, slow_repo: Path) -> None:
    client = vsc
    run_id = (await command(client, "flow.launchEpic", {"plan": "calc.epic.json"}))["runId"]
    token = await client.until(lambda: next(iter(client.progress_reports), None), 30, "a progress token")
    await client.until(lambda: lane_status(client, run_id, "core") == "active", 30, "core active")
    client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
    await client.until(lambda: run_status(client, run_id) == "cancelled", 30, "cancelled run")
    await client.until(lambda: ended_progress(client), 10, "progress end")
    assert client.progress_reports[token][-1].message.startswith("cancelled")
