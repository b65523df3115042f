"""Re-attaching from a view checkpoint: a real server shows a live run's snapshot and `flow/status`
exactly as it does from the whole trace, then follows the lines written after it."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowd.base import jsonl
from flowd.cost.prices import pricer
from flowd.events.model import ExecutorLeased, RunEnded, TaskStarted
from flowd.trace.checkpoint import checkpoint_path
from flowd.trace.log import RunRecord, TraceFollower, TraceWriter, trace_path, write_run_record
from flowd.trace.view import RunView
from tests.conftest import stop_daemons
from tests.server.conftest import CONFIG, FlowClient, initialize, request, stop_client
from tests.test_trace_fold import one_of_each

RUN = "20261130-0900-live"
SNAPSHOT = ("flow/run", "flow/lane", "flow/task", "flow/clone", "flow/cost")


@pytest.fixture
def live_run(repo: Path) -> Iterator[Path]:
    """A run whose runner is alive (a `sleep` stands in for it), its trace checkpointed midway."""
    runner = subprocess.Popen(["sleep", "600"])
    try:
        path = trace_path(repo, RUN)
        writer = TraceWriter(path, RUN)
        writer.fold_into(RunView(run_id=RUN, pricer=pricer(None)), checkpoint_every=2000)
        events = [e for e in one_of_each() if not isinstance(e, RunEnded)]
        held = ExecutorLeased(executor="z", clone=7, role="judge", label="a")  # held to the end
        for event in [events[0], held, *events[1:] * 4]:
            writer.emit(event)
        writer.checkpoints = None  # the runner goes on: the last lines are after the checkpoint
        writer.close()
        write_run_record(
            repo,
            RunRecord(
                run_id=RUN, epic_id="e", plan="p.json", pid=runner.pid, started_at="2026-11-30T09:00:00.000Z"
            ),
        )
        yield path
    finally:
        runner.kill()
        runner.wait()


async def attach(repo: Path, append: bytes | None = None) -> tuple[dict[str, list[Any]], Any]:
    """The snapshot notes a fresh server sends for the run, and its `flow/status`; with `append`,
    that line is written after the snapshot and its `flow/task` awaited."""
    client = await CONFIG.start()
    assert isinstance(client, FlowClient)
    try:
        await initialize(client, repo)
        await client.until(lambda: any(p["runId"] == RUN for p in client.of("flow/cost")), 60, "snapshot")
        notes = {m: [p for p in client.of(m) if p.get("runId") == RUN] for m in SNAPSHOT}
        status = await request(client, "flow/status", {})
        if append is not None:
            with trace_path(repo, RUN).open("ab") as handle:
                handle.write(append)
            await client.until(
                lambda: any(p["title"] == "appended" for p in client.of("flow/task")), 30, "tail"
            )
        await asyncio.wait_for(client.shutdown_session(), 10)
    finally:
        await stop_client(client)
        # A fresh server each time: the repository's daemon (which would keep its fold) goes too.
        stop_daemons(Path(os.environ["XDG_RUNTIME_DIR"]))
    return notes, status


async def test_a_live_run_reattaches_from_its_checkpoint_as_from_the_whole_trace(
    repo: Path, live_run: Path
) -> None:
    follower = TraceFollower(live_run)
    assert follower.restore(RunView(run_id=RUN, pricer=pricer(None)))
    assert 0 < follower.offset < live_run.stat().st_size  # some lines only after the checkpoint
    appended = TaskStarted(lane="b", index=3, count=3, title="appended")
    line = jsonl.dumps(
        {"v": 1, "seq": 10**6, "at": "2026-11-30T10:00:00.000Z", "runId": RUN, "event": appended.wire()}
    )
    from_checkpoint, status = await attach(repo, line + b"\n")
    assert from_checkpoint["flow/lane"] and from_checkpoint["flow/cost"][-1]["tokens"] > 0
    assert any(c["executor"] == "z" for c in from_checkpoint["flow/clone"])

    ckpt = checkpoint_path(live_run)
    ckpt.rename(ckpt.with_name("aside.json"))
    live_run.write_bytes(live_run.read_bytes()[: -len(line) - 1])  # as it was
    from_trace, status_from_trace = await attach(repo)
    assert from_checkpoint == from_trace
    assert status == status_from_trace
