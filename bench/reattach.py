"""Re-attaching to a long run: `flowd serve` and `flowd status` over a 100 k and a 1 M event trace.

Generates a realistic live run in a temp repository: 20 lanes (12 merged, 8 still active), each
story planned into tasks worked through by coder turns (tool calls, a message, a usage record),
gates, reviewer turns with their leases, merges, an occasional note. Lines are the writer's own
format (about 250 bytes each). The run's `run.json` names a live process (a `sleep` this script
starts and kills), so the server treats the run as active.

A live runner checkpoints its folded view next to the trace every 4 MB (docs/trace.md, "View
checkpoint"); the script writes the checkpoint the runner would have written last, at the worst
moment: a full 4 MB (about 16 k events) before the end, so readers fold the checkpoint and a 4 MB
tail. Each reader is measured twice in the same run: from that checkpoint, and with it removed
(the whole trace folded, as before checkpoints and as any reader does with a missing or stale one;
such a reader leaves a checkpoint for the next one, which the script removes).

For each size it measures, each in a fresh subprocess:

- `flowd serve`: a pygls client starts it over stdio and sends `initialize`/`initialized`; the
  time until the run's snapshot (`flow/cost` of the run, the last note of the snapshot) arrives,
  and the server's peak RSS (VmHWM); then one appended `TaskStarted` line and the time until its
  `flow/task` arrives (followed incrementally, not re-read).
- `flowd status --json`: wall time and peak RSS (getrusage of the child).
- a bare `json.loads` of every line of the trace, in a subprocess (CPU time of the whole process,
  its start included, as for the readers): what any reader that parses each line pays;
- the floor: a bare pygls server (`bench/server_start.py`'s) answering `initialize`, medians of 3:
  a server built on pygls can show nothing before that;
- the anchor: the pre-streaming reader, every line validated into pydantic objects and folded
  (`fold(read_trace(...))`), in a subprocess, at the smaller size only unless `--anchor-all`.

Targets (issue 16): the 1 M trace shown within 3 s under 150 MB, memory independent of length.
Targets (issue 27), in CPU time, same run: the server from the checkpoint no slower than
`flowd status` from it; the server on the whole trace <= 0.6x the bare `json.loads` pass.

    .venv/bin/python bench/reattach.py [--sizes 100000,1000000] [--anchor-all]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flowd.base import jsonl

RUN_ID = "20261130-0900-bench"
LANES = 20
ACTIVE = 8
TASKS = 6
MODEL = "claude-sonnet-4-5"

_TEXT = (
    "the handler now validates the token before it reads the session and returns a clear error "
    "when the store is unreachable; tests cover the expired and the missing cases"
)
_WORDS = _TEXT.split(" ")


class TraceGen:
    """Writes one run's trace line by line in the writer's format (`flowd.events.model.dump_envelope`)."""

    def __init__(self, handle: Any, seed: int = 16) -> None:
        self.handle = handle
        self.rng = random.Random(seed)
        self.seq = 0
        self.clock = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

    def emit(self, event: dict[str, Any]) -> None:
        self.seq += 1
        self.clock += timedelta(milliseconds=self.rng.randrange(5, 400))
        at = self.clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.clock.microsecond // 1000:03d}Z"
        line = {"v": 1, "seq": self.seq, "at": at, "runId": RUN_ID, "event": event}
        self.handle.write(jsonl.dumps(line) + b"\n")

    def text(self, low: int, high: int) -> str:
        n = self.rng.randrange(low, high)
        return " ".join(self.rng.choice(_WORDS) for _ in range(n))

    def turn(self, lane: str, agent: str, executor: str, clone: int, tools: int) -> None:
        for _ in range(tools):
            kind = self.rng.random()
            mod = self.rng.randrange(40)
            if kind < 0.5:
                args: Any = {
                    "path": f"src/{lane}/mod{mod}.py",
                    "old": self.text(3, 8),
                    "new": self.text(4, 10),
                }
                tool = "edit"
            elif kind < 0.8:
                args, tool = {"path": f"src/{lane}/mod{mod}.py"}, "read"
            else:
                args, tool = {"command": f"python -m pytest -q tests/test_{lane}.py"}, "bash"
            self.emit({"type": "ToolUse", "lane": lane, "executor": executor, "tool": tool, "args": args})
        self.emit({"type": "AssistantMessage", "lane": lane, "agent": agent, "text": self.text(12, 40)})
        cached = self.rng.randrange(1_000, 40_000)
        usage = {"input": cached + self.rng.randrange(500, 9_000), "output": self.rng.randrange(50, 3_000)}
        usage |= {"total": usage["input"] + usage["output"], "cachedRead": cached, "cacheWrite": 0}
        self.emit(
            {
                "type": "TokensUsed",
                "lane": lane,
                "executor": executor,
                "clone": clone,
                "agent": agent,
                "model": MODEL,
                "usage": usage,
            }
        )


class Lane:
    """One story's life as a generator of steps; each `step()` writes one turn's worth of lines."""

    def __init__(self, gen: TraceGen, index: int, turns_per_task: int) -> None:
        self.gen = gen
        self.name = f"story-{index:02d}"
        self.clone = index % ACTIVE + 1
        self.steps = self._life(turns_per_task)
        self.done = False

    def step(self) -> None:
        try:
            next(self.steps)
        except StopIteration:
            self.done = True

    def _lease(self, role: str, clone: int, leased: bool) -> None:
        kind = "ExecutorLeased" if leased else "ExecutorReleased"
        self.gen.emit({"type": kind, "executor": "claude", "clone": clone, "role": role, "label": self.name})

    def _life(self, turns: int) -> Any:
        gen, lane = self.gen, self.name
        gen.emit({"type": "StoryStatusChanged", "story": lane, "status": "active"})
        self._lease("coder", self.clone, True)
        gen.emit({"type": "StageStarted", "stage": "plan", "lane": lane})
        gen.turn(lane, "planner", "claude", self.clone, 2)
        titles = [f"{lane}: part {n} of the feature" for n in range(1, TASKS + 1)]
        gen.emit({"type": "TasksPlanned", "lane": lane, "tasks": [{"title": t} for t in titles]})
        gen.emit({"type": "StageCompleted", "stage": "plan", "lane": lane})
        yield
        for index, title in enumerate(titles, start=1):
            gen.emit(
                {
                    "type": "TaskStarted", "lane": lane, "index": index, "count": TASKS, "title": title,
                    "executor": "claude", "clone": self.clone,
                }
            )  # fmt: skip
            for turn in range(turns):
                gen.turn(lane, "coder", "claude", self.clone, gen.rng.randrange(3, 8))
                if turn % 4 == 3:
                    ok = gen.rng.random() < 0.8
                    gen.emit(
                        {
                            "type": "GateResult", "lane": lane, "where": "task", "gate": "python -m pytest -q",
                            "ok": ok, "exitCode": 0 if ok else 1, "durationMs": gen.rng.randrange(800, 9000),
                        }
                    )  # fmt: skip
                    self._lease("reviewer", 20 + self.clone, True)
                    gen.turn(lane, "reviewer", "claude", 20 + self.clone, 2)
                    self._lease("reviewer", 20 + self.clone, False)
                yield
            gen.emit({"type": "TaskCompleted", "lane": lane, "index": index, "count": TASKS, "title": title})
        gen.emit({"type": "StoryJudged", "lane": lane, "round": 1, "clean": True, "issues": []})
        gen.emit({"type": "StageStarted", "stage": "merge", "lane": lane})
        gen.emit({"type": "StoryMerged", "lane": lane, "branch": f"story/bench/{lane}", "commit": "ab" * 20})
        gen.emit({"type": "StoryStatusChanged", "story": lane, "status": "done"})
        self._lease("coder", self.clone, False)
        yield


def generate(path: Path, events: int, seed: int = 16) -> int:
    """A live run of about `events` lines; returns the exact count."""
    # One coder turn with its share of gates and reviews is about 8.5 lines; 12 lanes finish and
    # 8 get about half-way, so each lane gets events / 16 lines.
    turns_per_task = max(1, round(events / 16 / TASKS / 8.5))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb", buffering=1 << 20) as handle:
        gen = TraceGen(handle, seed)
        names = [f"story-{i:02d}" for i in range(LANES)]
        gen.emit(
            {
                "type": "RunStarted", "epicId": "bench", "epicBranch": "epic/bench", "plan": "bench.epic.json",
                "stories": names, "concurrency": ACTIVE, "titles": {n: f"Story {n}" for n in names},
                "budgetUsd": 500.0,
            }
        )  # fmt: skip
        waiting = [Lane(gen, i, turns_per_task) for i in range(LANES)]
        active = [waiting.pop(0) for _ in range(ACTIVE)]
        finished = 0
        while gen.seq < events and active:
            lane = gen.rng.choice(active)
            lane.step()
            if lane.done:
                active.remove(lane)
                finished += 1
                if waiting and finished <= LANES - ACTIVE:
                    active.append(waiting.pop(0))
    return gen.seq


def build_repo(root: Path, events: int, pid: int) -> tuple[Path, int, int]:
    repo = root / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    trace = repo / ".flow" / "runs" / RUN_ID / "trace.jsonl"
    count = generate(trace, events)
    record = {
        "runId": RUN_ID,
        "epicId": "bench",
        "plan": str(repo / "bench.epic.json"),
        "pid": pid,
        "startedAt": "2026-11-30T09:00:00.000Z",
    }
    (trace.parent / "run.json").write_bytes(jsonl.dumps(record))
    return repo, count, trace.stat().st_size


_ANCHOR = """
import sys, resource
from pathlib import Path
from flowd.trace.log import read_trace
from flowd.trace.view import fold
view = fold(sys.argv[2], read_trace(Path(sys.argv[1])))
print(view.totals.tokens)
"""

_JSON_LOADS = """
import json, sys
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        json.loads(line)
"""

_PEAK = """
import resource, subprocess, sys
child = subprocess.run(sys.argv[1:], capture_output=True)
sys.stdout.buffer.write(child.stdout)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write(f"{usage.ru_utime + usage.ru_stime} {usage.ru_maxrss}")
sys.exit(child.returncode)
"""


def measured(argv: list[str], cwd: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of a command, under a fresh parent each."""
    t0 = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", _PEAK, *argv], cwd=cwd, capture_output=True)
    elapsed = time.perf_counter() - t0
    if child.returncode != 0:
        raise SystemExit(f"{argv} failed: {child.stdout[-2000:]!r}")
    cpu, peak = child.stderr.decode().strip().splitlines()[-1].split()
    return elapsed, float(cpu), int(peak) / 1024


async def serve(repo: Path, *extra: str) -> tuple[float, float, float, float]:
    """(seconds to the snapshot, the server's CPU seconds by then, its peak RSS MB, seconds from an
    appended line to its note). A fresh in-process server (`--no-daemon`) unless `extra` says
    otherwise: this measures one server's own re-attach (bench/daemon.py measures the daemon's)."""
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench", "1")
    shown = asyncio.Event()
    followed = asyncio.Event()

    @client.feature("flow/cost")  # type: ignore[untyped-decorator]
    def on_cost(params: Any) -> None:
        if params.runId == RUN_ID:
            shown.set()

    @client.feature("flow/task")  # type: ignore[untyped-decorator]
    def on_task(params: Any) -> None:
        if shown.is_set() and params.title == "appended by the bench":
            followed.set()

    for method in ("flow/run", "flow/lane", "flow/clone", "window/workDoneProgress/create", "$/progress"):
        client.feature(method)(lambda params: None)

    t0 = time.perf_counter()
    await client.start_io(sys.executable, "-m", "flowd", "serve", *(extra or ("--no-daemon",)), cwd=str(repo))
    await client.initialize_async(
        lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=repo.as_uri())
    )
    client.initialized(lsp.InitializedParams())
    await asyncio.wait_for(shown.wait(), 300)
    shown_s = time.perf_counter() - t0
    server = client._server
    assert server is not None
    cpu = _cpu_seconds(server.pid)
    peak = _vm_hwm(server.pid)
    trace = repo / ".flow" / "runs" / RUN_ID / "trace.jsonl"
    line = {
        "v": 1, "seq": 10**8, "at": "2026-11-30T23:00:00.000Z", "runId": RUN_ID,
        "event": {"type": "TaskStarted", "lane": "story-19", "index": 99, "count": 99, "title": "appended by the bench"},
    }  # fmt: skip
    t1 = time.perf_counter()
    with trace.open("ab") as handle:
        handle.write(jsonl.dumps(line) + b"\n")
    await asyncio.wait_for(followed.wait(), 60)
    follow_s = time.perf_counter() - t1
    peak = max(peak, _vm_hwm(server.pid))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()  # type: ignore[no-untyped-call]
    return shown_s, cpu, peak, follow_s


def bare_pygls(cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds from spawn to `initialize` answered by a bare pygls server (the
    `server_start.py` one), medians of 3: what any pygls server pays before it may send anything."""
    from server_start import BARE, initialize  # bench/ is the script's own folder

    script = cwd.parent / "bare_server.py"
    script.write_text(BARE, encoding="utf-8")
    argv = [sys.executable, str(script)]
    runs = [asyncio.run(initialize(argv, cwd)) for _ in range(3)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_checkpoint(trace: Path) -> int:
    """The runner's last checkpoint, a full `CHECKPOINT_BYTES` before the end; its offset."""
    from flowd.cost.prices import pricer
    from flowd.trace.checkpoint import CHECKPOINT_BYTES, capture, save
    from flowd.trace.fastfold import fold_lines
    from flowd.trace.view import RunView

    view = RunView(run_id=RUN_ID, pricer=pricer(None))  # the bench repo has no price overrides
    limit = trace.stat().st_size - CHECKPOINT_BYTES
    offset = 0
    last = b""
    with trace.open("rb") as handle:
        while offset < limit:
            data = handle.read(min(1 << 20, limit - offset))
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                break
            fold_lines(view, data[:cut])
            last = data[data.rfind(b"\n", 0, cut - 1) + 1 : cut]
            offset += cut
            handle.seek(offset)
    captured = capture(view, offset, last)
    assert captured is not None and save(trace, captured)
    return offset


def reattach(repo: Path, label: str, before: Any) -> tuple[float, float, float, float]:
    """(status wall, status CPU, serve wall, serve CPU), printed with their peak RSS; `before()`
    runs before each reader."""
    flowd = str(Path(sys.executable).with_name("flowd"))
    before()
    status_s, status_cpu, status_mb = measured([flowd, "status", "--json"], repo)
    print(
        f"flowd status --json, {label}: {status_s:.2f} s (CPU {status_cpu:.2f} s), peak RSS {status_mb:.0f} MB"
    )
    before()
    shown_s, serve_cpu, serve_mb, follow_s = asyncio.run(serve(repo))
    print(
        f"flowd serve re-attach, {label}: shown after {shown_s:.2f} s (server CPU {serve_cpu:.2f} s), "
        f"peak RSS {serve_mb:.0f} MB; an appended line followed in {follow_s * 1000:.0f} ms"
    )
    met = shown_s <= 3.0 and serve_mb < 150 and status_s <= 3.0 and status_mb < 150
    met_cpu = serve_cpu <= 3.0 and status_cpu <= 3.0 and serve_mb < 150 and status_mb < 150
    print(
        f"  target (shown <= 3 s, < 150 MB, serve and status): wall {'met' if met else 'NOT met'}, "
        f"CPU {'met' if met_cpu else 'NOT met'} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    return status_s, status_cpu, shown_s, serve_cpu


def bench_size(events: int, anchor: bool) -> None:
    runner = subprocess.Popen(["sleep", "3600"])  # stands in for the live `flowd run` process
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            repo, count, size = build_repo(Path(tmp), events, runner.pid)
            gen_s = time.perf_counter() - t0
            print(f"-- {count:,} events, {size / 1e6:.0f} MB trace (generated in {gen_s:.1f} s)")
            trace = repo / ".flow" / "runs" / RUN_ID / "trace.jsonl"
            offset = write_checkpoint(trace)
            print(
                f"view checkpoint at {offset / 1e6:.1f} MB: {(size - offset) / 1e6:.1f} MB of trace after it"
            )
            ckpt = trace.with_name("view-checkpoint.jsonl")
            runners = ckpt.read_bytes()

            def put_back() -> None:  # each reader finds the runner's checkpoint
                ckpt.write_bytes(runners)

            def take_away() -> None:  # a reader without one leaves one for the next: remove it
                ckpt.unlink(missing_ok=True)

            fast = reattach(repo, "from the checkpoint", put_back)
            slow = reattach(repo, "whole trace (no checkpoint)", take_away)
            print(
                f"from the checkpoint against the whole trace, CPU: status {slow[1] / fast[1]:.1f}x less, "
                f"serve {slow[3] / fast[3]:.1f}x less"
            )
            loads_s, loads_cpu, _ = measured([sys.executable, "-c", _JSON_LOADS, str(trace)], repo)
            print(f"bare json.loads of every line: {loads_s:.2f} s (CPU {loads_cpu:.2f} s)")
            same = fast[3] <= fast[1]
            print(
                f"  serve / status from the checkpoint, CPU: {fast[3] / fast[1]:.2f}x (target <= 1): "
                f"{'met' if same else 'NOT met'}"
            )
            floor_s, floor_cpu = bare_pygls(repo)
            print(
                f"  the floor, a bare pygls server (nothing of flowd's) answering initialize: {floor_s:.2f} s "
                f"(CPU {floor_cpu:.2f} s, median of 3) = {floor_cpu / fast[1]:.2f}x status's CPU; serve "
                f"shows its snapshot only after initialize, {fast[3] - floor_cpu:.2f} s of CPU after the floor"
            )
            print(
                f"  serve whole trace / bare json.loads, CPU: {slow[3] / loads_cpu:.2f}x (target <= 0.6): "
                f"{'met' if slow[3] <= 0.6 * loads_cpu else 'NOT met'}"
            )
            if anchor:
                old_s, old_cpu, old_mb = measured([sys.executable, "-c", _ANCHOR, str(trace), RUN_ID], repo)
                print(
                    f"anchor (pydantic per line, then fold): {old_s:.2f} s (CPU {old_cpu:.2f} s), peak RSS "
                    f"{old_mb:.0f} MB; flowd status (whole trace) is {old_cpu / slow[1]:.1f}x faster in CPU"
                )
    finally:
        runner.kill()
        runner.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--anchor-all", action="store_true", help="run the slow anchor at every size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for n, events in enumerate(sizes):
        bench_size(events, anchor=args.anchor_all or n == 0)


if __name__ == "__main__":
    main()
