"""Notification latency of `flowd serve`: trace line written → `flow/task` at a real client.

A writer thread appends scripted events for 20 lanes to a run's trace (as `flowd run` would); a
pygls client connected to `flowd serve` over stdio records when each task notification arrives.
Prints p50/p95 latency (target p95 <= 100 ms), the idle server's RSS (target < 100 MB) and the
time to answer `initialize` (target < 1 s).

    .venv/bin/python bench/notify_latency.py [--lanes 20] [--tasks 10] [--gap-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from flowd.base.timeutil import iso
from flowd.events.model import (
    RunEnded,
    RunStarted,
    StoryStatusChanged,
    TaskCompleted,
    TaskStarted,
    TokensUsed,
    Usage,
)
from flowd.trace.log import RunRecord, TraceWriter, trace_path, write_run_record

RUN_ID = "bench-run"


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    # An active run (this process is its "runner"): the server re-attaches to it on start.
    record = RunRecord(
        run_id=RUN_ID, epic_id="bench", plan=str(repo / "bench.epic.json"), pid=os.getpid(), started_at=iso()
    )
    write_run_record(repo, record)
    return repo


def _write(
    repo: Path, lanes: int, tasks: int, gap: float, written: dict[tuple[str, int, str], float]
) -> None:
    writer = TraceWriter(trace_path(repo, RUN_ID), RUN_ID)
    names = [f"lane-{n:02d}" for n in range(1, lanes + 1)]
    writer.emit(
        RunStarted(
            epic_id="bench",
            epic_branch="epic/bench",
            plan="bench.epic.json",
            stories=names,
            concurrency=lanes,
        )
    )
    for name in names:
        writer.emit(StoryStatusChanged(story=name, status="active"))
    for index in range(1, tasks + 1):
        for name in names:
            for state in ("started", "completed"):
                event: Any
                if state == "started":
                    event = TaskStarted(lane=name, index=index, count=tasks, title=f"task {index}")
                else:
                    event = TaskCompleted(lane=name, index=index, count=tasks, title=f"task {index}")
                written[(name, index, state)] = time.monotonic()
                writer.emit(event)
                writer.emit(
                    TokensUsed(lane=name, agent="coder", usage=Usage(input=100, output=20, total=120))
                )
                time.sleep(gap)  # the pace of the scripted events, not a wait for the server
    for name in names:
        writer.emit(StoryStatusChanged(story=name, status="done"))
    writer.emit(RunEnded(outcome="done", done=lanes, failed=0, skipped=0))
    writer.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main(lanes: int, tasks: int, gap_ms: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp))
        client = LanguageClient("bench", "1")
        received: dict[tuple[str, int, str], float] = {}
        done = asyncio.Event()
        expected = lanes * tasks * 2

        @client.feature("flow/task")  # type: ignore[untyped-decorator]
        def on_task(params: Any) -> None:
            if params.state != "planned":
                received.setdefault((params.lane, params.index, params.state), time.monotonic())
                if len(received) >= expected:
                    done.set()

        for method in ("flow/run", "flow/lane", "flow/clone", "flow/cost"):
            client.feature(method)(lambda params: None)

        t0 = time.monotonic()
        await client.start_io(sys.executable, "-m", "flowd", "serve", cwd=str(repo))
        await client.initialize_async(
            lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=repo.as_uri())
        )
        init_s = time.monotonic() - t0
        client.initialized(lsp.InitializedParams())
        await client.protocol.send_request_async("flow/status", {})  # the server is attached and idle
        server = client._server
        assert server is not None
        rss = _rss_mb(server.pid)

        written: dict[tuple[str, int, str], float] = {}
        thread = threading.Thread(target=_write, args=(repo, lanes, tasks, gap_ms / 1000, written))
        thread.start()
        try:
            await asyncio.wait_for(done.wait(), 60 + expected * gap_ms / 1000 * 2)
        finally:
            await asyncio.to_thread(thread.join)
        latencies = sorted((received[k] - written[k]) * 1000 for k in written if k in received)
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()  # type: ignore[no-untyped-call]

    p50 = statistics.median(latencies)
    p95 = latencies[int(len(latencies) * 0.95) - 1]
    print(f"lanes={lanes} task notifications={len(latencies)}/{expected}")
    print(f"latency p50={p50:.1f} ms p95={p95:.1f} ms max={latencies[-1]:.1f} ms (target p95 <= 100 ms)")
    print(f"idle server RSS={rss:.1f} MB (target < 100 MB)")
    print(f"initialize answered in {init_s * 1000:.0f} ms (target < 1000 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    a = parser.parse_args()
    asyncio.run(main(a.lanes, a.tasks, a.gap_ms))
