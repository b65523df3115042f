"""Live perimeter diagnostics of `flowd serve`: stray write in a story worktree → `perimeter.*`
diagnostic at a real client, with 20 lanes running, from each story's first attempt.

This process plays `flowd run`: it writes a run whose 20 lanes turn `active` *before* their
worktrees exist (as a first attempt does), then, once the server follows the run, creates each
lane's worktree and state file the way the engine does and writes a file outside the lane's
perimeter into it. A pygls client connected to `flowd serve` over stdio records when the
diagnostic on the worktree file and its mirror in the checkout arrive. A second round writes
one more stray per lane into the now-watched worktrees.

Prints p50/p95 of write → both diagnostics (target p95 <= 1 s) and, as the baseline measured in
the same run, what one perimeter scan of a worktree costs here (the floor of any live check).

    .venv/bin/python bench/perimeter_latency.py [--lanes 20] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from flowd.base.timeutil import iso
from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.state import EpicPaths, StoryState, save_state
from flowd.events.model import RunStarted, StoryStatusChanged
from flowd.plan.parse import load_plan
from flowd.trace.log import RunRecord, TraceWriter, trace_path, write_run_record
from flowd.vcs.gitops import Repo

RUN_ID = "bench-perimeter"
EPIC = "bench"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, env=ENV, capture_output=True, text=True).stdout


def lane_names(lanes: int) -> list[str]:
    return [f"lane-{n:02d}" for n in range(1, lanes + 1)]


def make_repo(root: Path, lanes: int) -> tuple[Path, Path]:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# bench\n")
    plan = repo / f"{EPIC}.epic.json"
    stories = [{"id": n, "title": n, "owned": [f"src/{n}/"]} for n in lane_names(lanes)]
    plan.write_text(json.dumps({"epicId": EPIC, "epic": "perimeter bench", "stories": stories}))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    git(repo, "branch", f"epic/{EPIC}")
    Repo(repo).ensure_flow_excluded()
    return repo, plan


def start_run(repo: Path, plan: Path, lanes: int) -> TraceWriter:
    """A live run (this process is its runner) whose lanes are active before any worktree exists."""
    record = RunRecord(run_id=RUN_ID, epic_id=EPIC, plan=str(plan), pid=os.getpid(), started_at=iso())
    write_run_record(repo, record)
    writer = TraceWriter(trace_path(repo, RUN_ID), RUN_ID)
    names = lane_names(lanes)
    writer.emit(
        RunStarted(epic_id=EPIC, epic_branch=f"epic/{EPIC}", plan=str(plan), stories=names, concurrency=lanes)
    )
    for name in names:
        writer.emit(StoryStatusChanged(story=name, status="active"))
    return writer


def make_worktree(repo: Path, worktrees: Path, name: str) -> Path:
    """What the engine's first attempt does: worktree and branch, then the story's state file."""
    worktree = worktrees / name
    branch = f"story/{EPIC}/{name}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(worktree), f"epic/{EPIC}")
    base = git(repo, "rev-parse", f"epic/{EPIC}").strip()
    state = StoryState(
        id=name, hash="bench", branch=branch, worktree=str(worktree), status="started", base=base
    )
    save_state(EpicPaths(repo, EPIC), state)
    return worktree


def baseline_scan_ms(repo: Path, plan: Path, worktree: Path, name: str, rounds: int = 10) -> float:
    loaded = load_plan(plan)
    r = Repo(repo)
    times = []
    for _ in range(rounds):
        t0 = time.monotonic()
        perimeter_now(r, loaded, name, worktree)
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q + 0.999999) - 1)]


async def main(lanes: int, gap_ms: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo, plan = make_repo(Path(tmp), lanes)
        worktrees = Path(tmp) / "worktrees"
        client = LanguageClient("bench", "1")
        seen: dict[str, float] = {}
        progress = asyncio.Event()

        @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)  # type: ignore[untyped-decorator]
        def on_diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
            if any(str(d.code).startswith("perimeter.") for d in params.diagnostics):
                seen.setdefault(params.uri, time.monotonic())
                progress.set()

        active: set[str] = set()

        @client.feature("flow/lane")  # type: ignore[untyped-decorator]
        def on_lane(params: Any) -> None:
            if params.status == "active":
                active.add(params.lane)
                progress.set()

        for method in ("flow/run", "flow/task", "flow/clone", "flow/cost"):
            client.feature(method)(lambda params: None)

        writer = start_run(repo, plan, lanes)
        await client.start_io(sys.executable, "-m", "flowd", "serve", cwd=str(repo))
        await client.initialize_async(
            lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=repo.as_uri())
        )
        client.initialized(lsp.InitializedParams())

        async def until(predicate: Any, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not predicate():
                progress.clear()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit("bench: timed out (the server never showed the diagnostics)")
                try:
                    await asyncio.wait_for(progress.wait(), left)
                except TimeoutError:
                    continue

        await until(lambda: len(active) == lanes, 60)
        latencies: dict[str, list[float]] = {"first attempt": [], "watched": []}
        for round_name, stray in (("first attempt", "STRAY.txt"), ("watched", "STRAY2.txt")):
            written: dict[str, float] = {}
            for name in lane_names(lanes):
                worktree = worktrees / name
                if round_name == "first attempt":
                    await asyncio.to_thread(make_worktree, repo, worktrees, name)
                (worktree / stray).write_text("outside the perimeter\n")
                written[name] = time.monotonic()
                await asyncio.sleep(gap_ms / 1000)  # the pace of the writes, not a wait for the server
            # The worktree file's diagnostic and its mirror go out in one publication round.
            uris = {n: (worktrees / n / stray).as_uri() for n in written}
            await until(lambda uris=uris: all(u in seen for u in uris.values()), 120)
            for name, t in written.items():
                latencies[round_name].append((seen[uris[name]] - t) * 1000)
        baseline = await asyncio.to_thread(baseline_scan_ms, repo, plan, worktrees / "lane-01", "lane-01")

        writer.close()
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()  # type: ignore[no-untyped-call]
        for name in lane_names(lanes):
            git(repo, "worktree", "remove", "--force", str(worktrees / name))

    print(f"lanes={lanes} (all running; worktrees created after the lanes turned active)")
    print(f"baseline: one perimeter scan of a worktree = {baseline:.1f} ms")
    for round_name, values in latencies.items():
        p50, p95 = statistics.median(values), percentile(values, 0.95)
        print(
            f"{round_name}: stray write → perimeter diagnostic p50={p50:.0f} ms p95={p95:.0f} ms "
            f"max={max(values):.0f} ms; p95 = {p95 / 1000:.2f}× the 1 s target, {p95 / baseline:.1f}× one scan"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=20)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    a = parser.parse_args()
    asyncio.run(main(a.lanes, a.gap_ms))
