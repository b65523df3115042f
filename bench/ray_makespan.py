"""Makespan: the same 20-story epic with its lanes local and on a local Ray cluster (docs/scale-out.md).

A real repository, a real `flowd run` process each time, the bundled scripted agent as every
executor: each story's coder turn waits `--think` seconds (the model's thinking), every other turn
answers at once, one trivial gate. First with `[lanes] engine = "local"`, then with
`engine = "ray"` on a head and a worker node started with `ray start` on this machine (loopback
only, like tests/ray; starting the cluster is not counted), a bare repository as the remote.

Prints both makespans and their ratio (goal <= 1.2: the engine's own cost is small), and the
measured per-lane figures the paper estimate in docs/scale-out.md is built from: a story's median
duration in each mode (the difference is the per-lane overhead of placing, cloning, pushing and
fetching), and the median merge (serial on the runner in both modes).

    .venv/bin/python bench/ray_makespan.py [--stories 20] [--lanes 8] [--think 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.engine.scenario import FLOWD, Scenario, git, story  # noqa: E402
from tests.ray.cluster import driver_env, start_cluster  # noqa: E402


def build(root: Path, count: int, lanes: int, think: float, engine: str) -> Scenario:
    stories: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    for i in range(count):
        sid = f"s{i:02d}"
        # Four waves: every story after the first five waits for the one five before it.
        stories.append(story(sid, [f"src/{sid}.py"], [f"s{i - 5:02d}"] if i >= 5 else []))
        rules.append(
            {"when": {"role": "coder", "story": sid}, "delayMs": int(think * 1000),
             "writes": {f"src/{sid}.py": f"VALUE = {i}\n"}, "reply": f"{sid} done"}
        )  # fmt: skip
    executors = [{"id": "demo", "script": "script.json", "slots": lanes}]
    settings = f'gates = ["true"]\nconcurrency = {lanes}\njudgeRounds = 0\nmaxReviewRounds = 1\n'
    if engine == "ray":
        settings += '\n[lanes]\nengine = "ray"\nremote = "origin"\n'
    sc = Scenario.create(root, stories, rules, settings=settings, executors=executors, epic_id="mk")
    bare = root / "remote.git"
    git(root, "init", "-q", "--bare", str(bare))
    git(sc.repo, "remote", "add", "origin", str(bare))
    return sc


class CpuSampler:
    """CPU seconds (user + system) used while it runs by a process tree and by given sessions: the
    run's own process, its agents, and (on Ray) every process of the cluster's nodes. Sampled every
    0.2 s; what a process had used before is not counted, and a process that ends between two
    samples loses at most its last 0.2 s."""

    def __init__(self, root: int, sessions: list[int]) -> None:
        self.root, self.sessions = root, set(sessions)
        self.seen: dict[int, float] = {}
        self.before: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")

    def _sample(self, baseline: bool = False) -> None:
        parents: dict[int, int] = {}
        cpu: dict[int, float] = {}
        sids: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry)
            parents[pid], sids[pid] = int(fields[1]), int(fields[3])
            cpu[pid] = (int(fields[11]) + int(fields[12])) / self.tick
        if baseline:  # what ran before the sampler started is not counted
            self.before = cpu
            return
        for pid, seconds in cpu.items():
            ancestor, hops = pid, 0
            while ancestor not in (0, 1, self.root) and hops < 50:
                ancestor, hops = parents.get(ancestor, 0), hops + 1
            if ancestor == self.root or pid == self.root or sids[pid] in self.sessions:
                self.seen[pid] = max(self.seen.get(pid, 0.0), seconds - self.before.get(pid, 0.0))

    def _loop(self) -> None:
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(0.2)

    def __enter__(self) -> CpuSampler:
        self._sample(baseline=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def seconds(self) -> float:
        return sum(self.seen.values())


@dataclass
class Measured:
    wall: float
    cpu: float
    load: float
    trace: list[dict[str, Any]]


def run(sc: Scenario, env: dict[str, str], mode: str, sessions: list[int]) -> Measured:
    load = os.getloadavg()[0]
    started = time.monotonic()
    process = subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path), "--run-id", "bench"],
        cwd=sc.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with CpuSampler(process.pid, sessions) as sampler:
        stdout, stderr = process.communicate(timeout=1800)
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    elapsed = time.monotonic() - started
    trace_file = sc.repo / ".flow/runs/bench/trace.jsonl"
    lines = trace_file.read_text(encoding="utf-8").splitlines() if trace_file.is_file() else []
    trace = [json.loads(line) for line in lines]
    if done.returncode != 0:
        # Why each story failed is in the trace; the progress tail and stderr say the rest.
        failed = [
            f"{e['event']['story']}: {e['event'].get('reason')}"
            for e in trace
            if e["event"]["type"] == "StoryStatusChanged" and e["event"]["status"] == "failed"
        ]
        tail = done.stdout[-1500:] + "\n" + done.stderr[-1500:]
        raise BenchFailed(
            f"flowd run ({mode} lanes) failed ({done.returncode}):\n" + "\n".join(failed) + "\n" + tail
        )
    return Measured(elapsed, sampler.seconds(), load, trace)


class BenchFailed(Exception):
    pass


def _at(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(line["at"]).replace("Z", "+00:00")).timestamp()


def story_seconds(trace: list[dict[str, Any]]) -> list[float]:
    """Each story from `active` to `done`, as the runner's trace saw it."""
    began: dict[str, float] = {}
    spans: list[float] = []
    for line in trace:
        event = line["event"]
        if event["type"] == "StoryStatusChanged" and event["status"] == "active":
            began.setdefault(event["story"], _at(line))
        elif event["type"] == "StoryStatusChanged" and event["status"] == "done" and event["story"] in began:
            spans.append(_at(line) - began[event["story"]])
    return spans


# A story's life in the runner's trace, phase by phase (the first event of each kind per story):
# active → WorktreePrepared (worktree, coder lease) → first TaskStarted (catch-up, planner turn and
# the agent clones' start) → first TaskCompleted (coder turn, task gates, reviewer, commit) → merge
# stage (judge, perimeter; on Ray the push, the stream and the runner's fetch) → done (the merge
# lock, the merge, the epic gates).
PHASES = [
    ("worktree", "active", "WorktreePrepared"),
    ("planner turn + agents", "WorktreePrepared", "TaskStarted"),
    ("task (coder turn 3 s)", "TaskStarted", "TaskCompleted"),
    ("to the merge", "TaskCompleted", "merge"),
    ("merge", "merge", "done"),
]


def _marks(trace: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    marks: dict[str, dict[str, float]] = {}
    for line in trace:
        event = line["event"]
        kind = event["type"]
        story_id = event.get("story") or event.get("lane")
        if kind == "StoryStatusChanged" and event["status"] in ("active", "done"):
            kind = event["status"]
        elif kind == "StageStarted" and str(event["stage"]).endswith(": merge"):
            kind = "merge"
        if story_id:
            marks.setdefault(str(story_id), {}).setdefault(kind, _at(line))
    return marks


def phase_medians(trace: list[dict[str, Any]]) -> dict[str, float]:
    marks = _marks(trace)
    out: dict[str, float] = {}
    for name, start, end in PHASES:
        spans = [m[end] - m[start] for m in marks.values() if start in m and end in m]
        out[name] = statistics.median(spans) if spans else float("nan")
    return out


TIMING = re.compile(r"(\w+)=([0-9.]+)")


def lane_timings(trace: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of the runner's `lane timing` lines (one per placement, docs/scale-out.md)."""
    values: dict[str, list[float]] = {}
    for line in trace:
        event = line["event"]
        if event["type"] == "Info" and str(event.get("message", "")).startswith("lane timing"):
            for key, value in TIMING.findall(event["message"]):
                values.setdefault(key, []).append(float(value))
    return {key: statistics.median(v) for key, v in values.items()}


def settle(cluster: Any) -> float:
    """One driver joins and leaves the new cluster before the run: the first driver of a cluster
    just started waits for it to finish starting (seconds), which a long-lived cluster, the case
    this bench models, has done long before a run joins it. Its seconds are shown, not counted."""
    code = "import ray; ray.init(address='auto', log_to_driver=False); ray.shutdown()"
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", code], env=driver_env(cluster.address), check=True, capture_output=True
    )
    return time.monotonic() - started


def run_steps(measured: Measured) -> dict[str, float]:
    """The makespan outside the stories: the process before `RunStarted`, the start until the first
    story is active (on Ray: joining the cluster, the first pushes and placements), the end."""
    trace = measured.trace
    at = {line["event"]["type"]: _at(line) for line in reversed(trace)}  # the first of each type
    active = [
        _at(x)
        for x in trace
        if x["event"]["type"] == "StoryStatusChanged" and x["event"]["status"] == "active"
    ]
    done = [
        _at(x) for x in trace if x["event"]["type"] == "StoryStatusChanged" and x["event"]["status"] == "done"
    ]
    ended = _at(trace[-1])
    span = ended - at["RunStarted"]
    joined = next(
        (_at(x) for x in trace if "lanes on the Ray cluster" in str(x["event"].get("message"))), None
    )
    placed = at.get("LanePlaced")
    return {
        "process start and exit": measured.wall - span,
        "RunStarted to first active": min(active) - at["RunStarted"],
        "  of which joining the cluster": (joined - at["RunStarted"]) if joined else 0.0,
        "  of which to the first placed": (placed - (joined or placed)) if placed else 0.0,
        "first active to last done": max(done) - min(active),
        "last done to RunEnded": ended - max(done),
    }


def merge_seconds(trace: list[dict[str, Any]]) -> list[float]:
    began: dict[str, float] = {}
    spans: list[float] = []
    for line in trace:
        event = line["event"]
        if event["type"] == "StageStarted" and str(event["stage"]).endswith(": merge"):
            began[event["stage"]] = _at(line)
        elif event["type"] == "StageCompleted" and event["stage"] in began:
            spans.append(_at(line) - began.pop(event["stage"]))
    return spans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stories", type=int, default=20)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--think", type=float, default=3.0)
    parser.add_argument("--traces", help="a folder to write both runs' traces to")
    parser.add_argument(
        "--keep", action="store_true", help="keep the repositories and the nodes' files of a failed run"
    )
    args = parser.parse_args()
    try:
        import ray  # noqa: F401  (the nodes run this interpreter's Ray)
    except ImportError:
        sys.exit(
            "Ray is not installed in this environment; run `make bench` or `make .venv/.installed-ray` first."
        )
    root = Path(tempfile.mkdtemp(prefix="flowd-bench-ray-"))
    cluster = None
    keep = False
    settled = idle_cpu = 0.0
    try:
        local = build(root / "local", args.stories, args.lanes, args.think, "local")
        on_local = run(local, {**os.environ}, "local", [])
        cluster = start_cluster()
        settled = settle(cluster)
        with CpuSampler(-1, cluster.sids) as idle:  # the cluster's own CPU with nothing to do
            time.sleep(5.0)
        idle_cpu = idle.seconds()
        on_ray_sc = build(root / "ray", args.stories, args.lanes, args.think, "ray")
        on_ray = run(on_ray_sc, driver_env(cluster.address), "ray", cluster.sids)
    except BenchFailed as failed:
        keep = args.keep
        where = f"\n(kept {root})" if keep else ""
        raise SystemExit(f"{failed}{where}")
    finally:
        if cluster is not None:
            cluster.stop(keep_files=keep)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.traces:
        out = Path(args.traces)
        out.mkdir(parents=True, exist_ok=True)
        for name, measured in (("local", on_local), ("ray", on_ray)):
            lines = "".join(json.dumps(line) + "\n" for line in measured.trace)
            (out / f"{name}.trace.jsonl").write_text(lines, encoding="utf-8")
    report(args, on_local, on_ray)
    print(f"\n(not counted: a first driver joining the new cluster took {settled:.1f} s)")
    print(f"(the idle cluster's processes used {idle_cpu / 5.0:.2f} s of CPU per second before the run)")


def report(args: argparse.Namespace, local: Measured, ray: Measured) -> None:
    local_story = statistics.median(story_seconds(local.trace))
    ray_story = statistics.median(story_seconds(ray.trace))
    timing = lane_timings(ray.trace)
    # On Ray a lane's time before `active`: the epic push, the placement, the node's git work.
    before = sum(timing.get(k, 0.0) for k in ("epicPushWait", "epicPush", "place", "nodeLockWait", "nodeGit"))
    nodes = {e["event"]["node"] for e in ray.trace if e["event"]["type"] == "LanePlaced"}
    print(f"{args.stories} stories, {args.lanes} lanes, coder turn {args.think:.1f} s, cpus {os.cpu_count()}")
    print(f"local makespan      {local.wall:7.1f} s   cpu {local.cpu:6.1f} s   load before {local.load:.1f}")
    print(
        f"ray makespan        {ray.wall:7.1f} s   cpu {ray.cpu:6.1f} s   load before {ray.load:.1f}   ({len(nodes)} nodes)"
    )
    print(
        f"ratio ray/local     {ray.wall / local.wall:7.2f}   (goal <= 1.20)   cpu ratio {ray.cpu / local.cpu:.2f}"
    )
    print(f"story median        local {local_story:5.1f} s   ray {ray_story:5.1f} s (+{before:.2f} s before active)   "
          f"per-lane overhead {ray_story + before - local_story:5.1f} s")  # fmt: skip
    print(f"merge median        local {statistics.median(merge_seconds(local.trace)):5.2f} s   "
          f"ray {statistics.median(merge_seconds(ray.trace)):5.2f} s")  # fmt: skip
    print("\nthe run's own steps (s)                local      ray    ray - local")
    lr, rr = run_steps(local), run_steps(ray)
    for name in lr:
        print(f"  {name:32s} {lr[name]:8.2f} {rr[name]:8.2f} {rr[name] - lr[name]:+10.2f}")
    print("\nper-story phases (medians, s)        local      ray    ray - local")
    lp, rp = phase_medians(local.trace), phase_medians(ray.trace)
    for name, _, _ in PHASES:
        print(f"  {name:32s} {lp[name]:8.2f} {rp[name]:8.2f} {rp[name] - lp[name]:+10.2f}")
    print("\na Ray lane's own steps (medians of the runner's `lane timing` lines, s)")
    labels = {
        "epicPushWait": "merge lock wait before the epic push",
        "epicPush": "epic push (0 when the remote has it)",
        "place": "placement: node pick + actor call to its first message",
        "nodeLockWait": "node lock wait (node)",
        "nodeGit": "node clone/fetch under the node lock (node)",
        "pipeline": "the story pipeline on the node",
        "pushes": "pushes of the story branch (count)",
        "pushMedian": "one push (node)",
        "streamMedian": "event stream latency, median",
        "streamMax": "event stream latency, max",
        "messages": "messages streamed (count)",
        "batches": "batches on the wire (count)",
        "fetch": "runner's fetch of the story branch",
        "merge": "runner's merge (lock wait, merge, epic gates)",
    }
    for key, label in labels.items():
        if key in timing:
            print(f"  {label:56s} {timing[key]:8.3f}")
    retried = [
        str(e["event"]["message"]) for e in ray.trace if "was tried again" in str(e["event"].get("message"))
    ]
    for message in retried:
        print(f"  retried: {message}")


if __name__ == "__main__":
    main()
