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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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


def run(sc: Scenario, env: dict[str, str], mode: str) -> tuple[float, list[dict[str, Any]]]:
    started = time.monotonic()
    done = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--run-id", "bench"],
        cwd=sc.repo, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        # The progress lines say which story failed and why; stderr is often empty.
        tail = (done.stderr or done.stdout)[-2000:]
        raise SystemExit(f"flowd run ({mode} lanes) failed ({done.returncode}):\n{tail}")
    lines = (sc.repo / ".flow/runs/bench/trace.jsonl").read_text(encoding="utf-8").splitlines()
    return elapsed, [json.loads(line) for line in lines]


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
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="flowd-bench-ray-"))
    cluster = None
    try:
        local = build(root / "local", args.stories, args.lanes, args.think, "local")
        local_s, local_trace = run(local, {**os.environ}, "local")
        cluster = start_cluster()
        on_ray = build(root / "ray", args.stories, args.lanes, args.think, "ray")
        ray_s, ray_trace = run(on_ray, driver_env(cluster.address), "ray")
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    local_story, ray_story = (
        statistics.median(story_seconds(local_trace)),
        statistics.median(story_seconds(ray_trace)),
    )
    nodes = {e["event"]["node"] for e in ray_trace if e["event"]["type"] == "LanePlaced"}
    print(f"{args.stories} stories, {args.lanes} lanes, coder turn {args.think:.1f} s, cpus {os.cpu_count()}")
    print(f"local makespan      {local_s:7.1f} s")
    print(f"ray makespan        {ray_s:7.1f} s   ({len(nodes)} nodes)")
    print(f"ratio ray/local     {ray_s / local_s:7.2f}   (goal <= 1.20)")
    print(f"story median        local {local_story:5.1f} s   ray {ray_story:5.1f} s   "
          f"per-lane overhead {ray_story - local_story:5.1f} s")  # fmt: skip
    print(f"merge median        local {statistics.median(merge_seconds(local_trace)):5.2f} s   "
          f"ray {statistics.median(merge_seconds(ray_trace)):5.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
