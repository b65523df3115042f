"""The merge train against the lanes' own bound (docs/merging.md).

24 independent stories on 8 lanes, one task each; every coder turn takes 1 s and every gate 2 s
(in a story worktree after its task, and on the epic per candidate). On the epic the gate is red
while any story's file still says `BROKEN`; a story that wrote it fixes it in its merge revision
(whose prompt carries the red gate's output naming the file). A real repository, a real
`flowd run` (in this process) and the bundled scripted agent.

Three scenarios, each against a baseline measured in the same run:
- one red story: the makespan against the lanes' bound (the stories' own lane work packed on the
  lanes, one epic gate, and the culprit's revision round with its epic gate); target <= 1.3x;
- all green: against the lanes' bound (no revision round); target <= 1.2x;
The lanes' bound is measured in the same run: each story's own time in its lane (active to ready to
merge) from the trace, so a loaded machine's slower turns count in the bound too; the ideal one (3
waves of 1-s turn + 2-s task gate, and so on) is printed beside it.
- every story red: against one-at-a-time merging (`mergeBatch = 1`, `mergeConcurrency = 1`) of
  the same epic; target <= 1.1x.

Prints the figures with the machine's load average (a loaded machine stretches every turn).

    .venv/bin/python bench/merge_train.py [--stories 24] [--lanes 8] [--only one-red] [--runs 1]
        [--profile]

`--runs N` repeats the chosen scenarios and prints each one's median ratio; `--profile` times
flowd's steps between the agent turns (bench/step_probes.py) and prints where every story's time
went, per scenario. The sandbox is the default one, `enforce` (Landlock).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import step_probes  # noqa: E402
from bench.throughput import between_turns  # noqa: E402
from flowd.base.timeutil import parse_iso  # noqa: E402
from flowd.events.model import (  # noqa: E402
    GateResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRevision,
    MergeRolledBack,
    StageStarted,
    StoryStatusChanged,
)
from tests.engine.scenario import Scenario, story  # noqa: E402

CODER_S = 1.0
GATE_S = 2.0
# Red on a candidate (named `_epic`, like the epic worktree) while a story's file says BROKEN.
GATE = (
    'sh -c \'sleep 2; test "$(basename "$(pwd)")" != _epic && exit 0; '
    'if grep -l BROKEN src/*.py 2>/dev/null; then echo "epic check: BROKEN in the files above"; exit 1; fi\''
)


def build(root: Path, count: int, lanes: int, red: set[str], *, serial: bool = False) -> Scenario:
    stories, rules = [], []
    for i in range(count):
        sid = f"s{i:02d}"
        path = f"src/{sid}.py"
        stories.append(story(sid, [path]))
        if sid in red:
            # The merge revision's prompt carries the red gate's output.
            rules.append(
                {"when": {"role": "coder", "story": sid, "prompt": "epic check: BROKEN"}, "delayMs": int(CODER_S * 1000),
                 "writes": {path: f"VALUE = {i}\n"}, "reply": f"{sid} fixed"}
            )  # fmt: skip
        body = f"VALUE = {i}  # BROKEN\n" if sid in red else f"VALUE = {i}\n"
        rules.append(
            {"when": {"role": "coder", "story": sid}, "delayMs": int(CODER_S * 1000),
             "writes": {path: body}, "reply": f"{sid} done"}
        )  # fmt: skip
    for sid in [s["id"] for s in stories]:
        plan = {"tasks": [{"title": f"{sid} work", "description": "Write it."}]}
        rules.insert(0, {"when": {"role": "planner", "story": sid}, "reply": json.dumps(plan)})
    executors = [
        {"id": "coders", "script": "script.json", "slots": lanes, "roles": ["coder"]},
        {"id": "helpers", "script": "script.json", "slots": lanes, "roles": ["planner", "reviewer", "judge"]},
    ]
    settings = (
        f"gates = [{json.dumps(GATE)}]\nconcurrency = {lanes}\njudgeRounds = 0\nmaxReviewRounds = 1\n"
        "gateRetries = 0\nmergeRevisionRounds = 1\n"
    )
    if serial:
        settings += "mergeBatch = 1\nmergeConcurrency = 1\n"
    return Scenario.create(root, stories, rules, settings=settings, executors=executors, epic_id="mt")


PROFILE = False


def measure(count: int, lanes: int, red: set[str], *, serial: bool = False) -> dict[str, Any]:
    step_probes.CALLS.clear()
    with tempfile.TemporaryDirectory() as tmp:
        sc = build(Path(tmp), count, lanes, red, serial=serial)
        result = sc.run()
        events = sc.events(result.run_id)
        merges = sc.merge_commits("epic/mt")
    if result.outcome != "done":
        raise SystemExit(f"the run ended {result.outcome} ({result.view.reason}): see the trace")
    makespan = (parse_iso(events[-1].at) - parse_iso(events[0].at)).total_seconds()
    own, revision = own_work(events)
    if PROFILE:
        step_probes.table(between_turns(events), f"{len(red)} red, every story")
    epic_runs = [e.event for e in events if isinstance(e.event, GateResult) and e.event.where == "epic"]
    return {
        "makespan": makespan,
        "own": own,
        "revision": revision,
        "batches": sum(1 for e in events if isinstance(e.event, MergeBatchStarted)),
        "bisect runs": sum(1 for e in events if isinstance(e.event, MergeBisect) and e.event.culprit is None),
        "revisions": sorted({e.event.lane for e in events if isinstance(e.event, MergeRevision)}),
        "epic gate runs": len(epic_runs),
        "merges": len(merges),
        "distinct merges": len(set(merges)),
    }


def own_work(events: list[Any]) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Each story's own time in its lane (from active to ready to merge), in the order they became
    active, and each culprit's merge revision round (from its merge undone to ready again)."""
    active: dict[str, float] = {}
    ready: dict[str, list[float]] = {}
    back: dict[str, float] = {}
    t0 = parse_iso(events[0].at)
    for e in events:
        at = (parse_iso(e.at) - t0).total_seconds()
        event = e.event
        if isinstance(event, StoryStatusChanged) and event.status == "active":
            active.setdefault(event.story, at)
        elif isinstance(event, StageStarted) and event.lane and event.stage == f"story {event.lane}: merge":
            ready.setdefault(event.lane, []).append(at)
        elif isinstance(event, MergeRolledBack):
            back.setdefault(event.lane, at)
    own = [(s, ready[s][0] - active[s]) for s in active if s in ready]
    rounds = {s: ready[s][1] - back[s] for s in back if len(ready.get(s, [])) > 1}
    return own, rounds


def lanes_bound(count: int, lanes: int, revision: bool) -> float:
    """The ideal: waves of coder turn + task gate, one epic gate, the culprit's round."""
    waves = -(-count // lanes)
    bound = waves * (CODER_S + GATE_S) + GATE_S
    return bound + (CODER_S + GATE_S + GATE_S if revision else 0.0)


def measured_bound(figures: dict[str, Any], lanes: int) -> float:
    """The same bound from this run's own lane times: the stories' measured work packed on the
    lanes in the order they started (no merge wait) and one epic gate; a culprit's chain is its
    work, the red epic gate, its measured revision round and the green epic gate. What the lanes
    alone cost on this machine, as loaded as it is."""
    free = [0.0] * lanes
    chains: list[float] = []
    for sid, work in figures["own"]:
        lane = free.index(min(free))
        free[lane] += work
        if sid in figures["revision"]:
            chains.append(free[lane] + GATE_S + float(figures["revision"][sid]) + GATE_S)
    return max([max(free) + GATE_S, *chains])


def line(name: str, figures: dict[str, Any], baseline: float, target: float, against: str) -> bool:
    ratio = figures["makespan"] / baseline
    ok = bool(ratio <= target)
    print(
        f"{name:>10}: makespan {figures['makespan']:.1f} s vs {against} {baseline:.1f} s = {ratio:.2f}x "
        f"(target <= {target}x: {'met' if ok else 'NOT met'}); batches {figures['batches']}, "
        f"bisection runs {figures['bisect runs']}, epic gate runs {figures['epic gate runs']}, "
        f"merges {figures['merges']} ({figures['distinct merges']} distinct), revised {figures['revisions'] or 'none'}"
    )
    return ok


def scenarios(only: str | None, n: int, lanes: int, ratios: dict[str, list[float]]) -> bool:
    """The chosen scenarios once; their ratios appended to `ratios`; all met."""
    ids = [f"s{i:02d}" for i in range(n)]
    ok = True
    if only in (None, "one-red"):
        culprit = ids[n // 2 + 1]
        figures = measure(n, lanes, {culprit})
        ideal = lanes_bound(n, lanes, True)
        bound = measured_bound(figures, lanes)
        ok &= line("one red", figures, bound, 1.3, "the lanes' measured bound")
        ratios.setdefault("one red", []).append(figures["makespan"] / bound)
        print(f"{'':>10}  (the ideal bound {ideal:.1f} s: {figures['makespan'] / ideal:.2f}x)")
        ok &= figures["revisions"] == [culprit] and figures["merges"] == n == figures["distinct merges"]
    if only in (None, "all-green"):
        figures = measure(n, lanes, set())
        ideal = lanes_bound(n, lanes, False)
        bound = measured_bound(figures, lanes)
        ok &= line("all green", figures, bound, 1.2, "the lanes' measured bound")
        ratios.setdefault("all green", []).append(figures["makespan"] / bound)
        print(f"{'':>10}  (the ideal bound {ideal:.1f} s: {figures['makespan'] / ideal:.2f}x)")
    if only in (None, "all-red"):
        serial = measure(n, lanes, set(ids), serial=True)
        figures = measure(n, lanes, set(ids))
        print(
            f"{'serial':>10}: makespan {serial['makespan']:.1f} s, epic gate runs {serial['epic gate runs']}"
        )
        ok &= line("all red", figures, serial["makespan"], 1.1, "one at a time")
        ratios.setdefault("all red", []).append(figures["makespan"] / serial["makespan"])
    return bool(ok)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stories", type=int, default=24)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--only", choices=["one-red", "all-green", "all-red"])
    parser.add_argument("--runs", type=int, default=1, help="run the chosen scenarios this many times")
    parser.add_argument("--profile", action="store_true", help="time flowd's steps between turns")
    args = parser.parse_args()
    if args.profile:
        global PROFILE
        PROFILE = True
        step_probes.install()
    n, lanes = args.stories, args.lanes
    load = os.getloadavg()
    print(f"{n} stories, {lanes} lanes, coder turns {CODER_S:g} s, gates {GATE_S:g} s; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    ok = True
    started = time.perf_counter()
    ratios: dict[str, list[float]] = {}
    for _ in range(args.runs):
        ok &= scenarios(args.only, n, lanes, ratios)
    if args.runs > 1:
        for name, values in ratios.items():
            listed = " ".join(f"{v:.2f}x" for v in values)
            print(f"{name:>10}: {listed}, median {statistics.median(values):.3f}x")
    print(f"bench wall time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.1f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
