"""Throughput: a 20-story random DAG on 8 lanes with slow coder turns, against its lower bound.

A real repository, a real `flowd run` (in this process, through `run_epic`) and the bundled
scripted agent as every executor: each story has one task whose coder turn waits a log-normal
time (median 3 s, sigma 0.6, clipped to 0.5-15 s: the model's thinking); every other turn
(planner, reviewer, judge) answers at once; one trivial gate (`true`) runs after each task and
after each merge. The lower bound is what no scheduler can beat: the longest chain of coder turns
through the DAG, or the total coder time over 8 lanes if that is longer.

Prints the makespan, its ratio to the lower bound (target <= 1.15) and, from the trace's
timestamps, where each story's time went besides its coder turn (median over the stories and the
sum over the critical path): launch (from the run's start or its last dependency's merge to the
story's start: the scheduler, waiting for a lane) → start (worktree, catch-up, planner turn) →
coder turn → review (gates, reviewer turn, commit) → merge (judge,
perimeter, merge, epic gates); then the run's end (the last merge to `RunEnded`). On the critical
chain these add up to the makespan.

    .venv/bin/python bench/throughput.py [--seed 3] [--stories 20] [--lanes 8] [--runs 1]
        [--window 8] [--dep-p 0.15] [--epic-gate-s 0] [--profile] [--timeline STORY]

`--runs N` runs the same epic N times and prints each ratio and their median; `--window` and
`--dep-p` shape the random DAG (each story depends on each of the `window` stories before it with
probability `dep-p`); `--epic-gate-s S` makes the gate take S seconds on the epic (the merge
train's candidates), as a real test suite does, and none in a lane, and counts one such gate after
each story of the chain in the bound (a dependent starts from its dependency's gated merge);
`--profile` also times flowd's steps between the agent turns
(bench/step_probes.py) and prints where the critical chain's stories, and all stories, spent that
time. The sandbox is the default one, `enforce` (Landlock), as on any Linux that offers it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import step_probes  # noqa: E402
from flowd.base.timeutil import parse_iso  # noqa: E402
from flowd.events.model import StoryMerged, StoryStatusChanged, TaskCompleted, TaskStarted, TokensUsed  # noqa: E402
from tests.engine.scenario import Scenario, story  # noqa: E402

PHASES = ("launch", "start", "coder", "turn overhead", "review", "merge")


def build(
    root: Path,
    rng: random.Random,
    count: int,
    lanes: int,
    window: int = 8,
    dep_p: float = 0.15,
    epic_gate_s: float = 0.0,
) -> tuple[Scenario, dict[str, float], dict[str, list[str]]]:
    delays: dict[str, float] = {}
    deps: dict[str, list[str]] = {}
    stories: list[dict[str, Any]] = []
    rules: list[dict[str, Any]] = []
    for i in range(count):
        sid = f"s{i:02d}"
        deps[sid] = sorted({f"s{j:02d}" for j in range(max(0, i - window), i) if rng.random() < dep_p})
        delay = min(15.0, max(0.5, rng.lognormvariate(math.log(3.0), 0.6)))
        delays[sid] = delay
        stories.append(story(sid, [f"src/{sid}.py"], deps[sid]))
        rules.append(
            {"when": {"role": "coder", "story": sid}, "delayMs": int(delay * 1000),
             "writes": {f"src/{sid}.py": f"VALUE = {i}\n"}, "reply": f"{sid} done",
             "usage": {"input": 1000, "output": 100}}
        )  # fmt: skip
    executors = [
        {"id": "coders", "script": "script.json", "slots": lanes, "roles": ["coder"]},
        {"id": "helpers", "script": "script.json", "slots": lanes, "roles": ["planner", "reviewer", "judge"]},
    ]
    # The gate: `true`, or one that takes `epic_gate_s` on the epic (the merge train's candidates),
    # as a real test suite does, and none in a lane.
    gate = f'case "$PWD" in */_train/*|*/_epic) sleep {epic_gate_s:g};; esac' if epic_gate_s else "true"
    settings = f"gates = [{json.dumps(gate)}]\nconcurrency = {lanes}\njudgeRounds = 1\nmaxReviewRounds = 1\n"
    sc = Scenario.create(root, stories, rules, settings=settings, executors=executors, epic_id="tp")
    return sc, delays, deps


def lower_bound(
    delays: dict[str, float], deps: dict[str, list[str]], lanes: int, epic_gate_s: float = 0.0
) -> tuple[float, list[str]]:
    """(the bound, the critical chain of coder turns, each followed by its epic gate: a dependent
    starts from its dependency's gated merge)."""
    longest: dict[str, tuple[float, list[str]]] = {}
    for sid in sorted(delays):  # ids are in topological order
        best = max((longest[d] for d in deps[sid]), default=(0.0, []), key=lambda x: x[0])
        longest[sid] = (best[0] + delays[sid] + epic_gate_s, [*best[1], sid])
    chain_s, chain = max(longest.values(), key=lambda x: x[0])
    return max(chain_s, sum(delays.values()) / lanes), chain


def phases(events: list[Any], deps: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    """Per story, seconds in each phase, from the trace's timestamps."""
    marks: dict[str, dict[str, datetime]] = {}
    for envelope in events:
        event, at = envelope.event, parse_iso(envelope.at)
        if isinstance(event, StoryStatusChanged) and event.status == "active":
            marks.setdefault(event.story, {})["active"] = at
        elif isinstance(event, TaskStarted):
            marks.setdefault(event.lane, {}).setdefault("task", at)
        elif isinstance(event, TokensUsed) and event.agent == "coder" and event.lane:
            marks.setdefault(event.lane, {}).setdefault("coded", at)
        elif isinstance(event, TaskCompleted):
            marks.setdefault(event.lane, {})["completed"] = at
        elif isinstance(event, StoryMerged):
            marks.setdefault(event.lane, {})["merged"] = at
    run_start = parse_iso(events[0].at)
    out: dict[str, dict[str, float]] = {}
    for sid, m in marks.items():
        if {"active", "task", "coded", "completed", "merged"} <= m.keys():
            ready = max(
                (marks[d]["merged"] for d in deps.get(sid, []) if "merged" in marks.get(d, {})),
                default=run_start,
            )
            out[sid] = {
                "launch": (m["active"] - ready).total_seconds(),
                "start": (m["task"] - m["active"]).total_seconds(),
                "coder": (m["coded"] - m["task"]).total_seconds(),
                "review": (m["completed"] - m["coded"]).total_seconds(),
                "merge": (m["merged"] - m["completed"]).total_seconds(),
            }
    return out


def timeline(events: list[Any], sid: str) -> None:
    """One story's events (its lane's, and the leases labelled with it), seconds from its start."""
    start: datetime | None = None
    for envelope in events:
        event = envelope.event
        if (
            getattr(event, "lane", None) != sid
            and getattr(event, "story", None) != sid
            and getattr(event, "label", None) != sid
        ):
            continue
        at = parse_iso(envelope.at)
        start = start or at
        detail = {
            k: v
            for k, v in event.model_dump(exclude_none=True).items()
            if k in ("stage", "role", "executor", "clone", "status", "agent")
        }
        print(f"  {(at - start).total_seconds():7.2f}s {event.type:<20} {detail}")


def run_start(events: list[Any]) -> None:
    start = parse_iso(events[0].at)
    for envelope in events:
        event = envelope.event
        note = getattr(event, "message", None) or getattr(event, "stage", None) or ""
        print(f"  {(parse_iso(envelope.at) - start).total_seconds():7.2f}s {event.type:<20} {note}")
        if isinstance(event, StoryStatusChanged) and event.status == "active":
            return


def between_turns(events: list[Any]) -> dict[str, list[tuple[float, float]]]:
    """Per story, its time outside its coder turn (epoch seconds): active → its coder turn, and the
    turn's end → done (merged, and what the story does after its merge before its dependents can
    launch; the launch before `active` is the scheduler's, not the lane's)."""
    marks: dict[str, dict[str, float]] = {}
    for envelope in events:
        event, at = envelope.event, parse_iso(envelope.at).timestamp()
        if isinstance(event, StoryStatusChanged) and event.status == "active":
            marks.setdefault(event.story, {})["active"] = at
        elif isinstance(event, TaskStarted):
            marks.setdefault(event.lane, {}).setdefault("task", at)
        elif isinstance(event, TokensUsed) and event.agent == "coder" and event.lane:
            marks.setdefault(event.lane, {})["coded"] = at
        elif isinstance(event, StoryStatusChanged) and event.status == "done":
            marks.setdefault(event.story, {})["done"] = at
    return {
        sid: [(m["active"], m["task"]), (m["coded"], m["done"])]
        for sid, m in marks.items()
        if {"active", "task", "coded", "done"} <= m.keys()
    }


def one_run(args: argparse.Namespace) -> float:
    """One epic; prints its figures and returns its ratio to the lower bound."""
    if args.profile:
        step_probes.CALLS.clear()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        sc, delays, deps = build(
            Path(tmp),
            random.Random(args.seed),
            args.stories,
            args.lanes,
            args.window,
            args.dep_p,
            args.epic_gate_s,
        )
        bound, chain = lower_bound(delays, deps, args.lanes, args.epic_gate_s)
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        result = sc.run()
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        events = sc.events(result.run_id)
    if result.outcome != "done":
        raise SystemExit(f"the run ended {result.outcome}: see the trace")
    makespan = (parse_iso(events[-1].at) - parse_iso(events[0].at)).total_seconds()
    times = phases(events, deps)
    for sid, t in times.items():
        t["turn overhead"] = t["coder"] - delays[sid]  # the ACP round trip around the model's time
    print(
        f"{args.stories} stories, {args.lanes} lanes, seed {args.seed}: coder turns {sum(delays.values()):.1f} s in all, "
        f"critical chain {' -> '.join(chain)}; load average {load:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(f"makespan {makespan:.2f} s (wall {wall:.2f} s) against a lower bound of {bound:.2f} s")
    own, children = (
        b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(cpu0, cpu1, strict=True)
    )
    print(
        f"CPU {own + children:.1f} s: flowd {own:.1f} s, the processes it started and reaped {children:.1f} s "
        "(agents, git, gates, reapers; less load-dependent than the makespan)"
    )
    verdict = "met" if makespan / bound <= args.target else "NOT met"
    print(f"ratio {makespan / bound:.3f}x (target <= {args.target}x): {verdict}")
    print(f"{'phase':>14} {'median/story':>13} {'sum on the critical chain':>26}")
    for phase in PHASES:
        median = statistics.median(t[phase] for t in times.values())
        on_chain = sum(times[s][phase] for s in chain if s in times)
        print(f"{phase:>14} {median:>12.2f}s {on_chain:>25.2f}s")
    print("on the critical chain, story by story:")
    for sid in chain:
        if sid in times:
            print(f"{sid:>14} " + "  ".join(f"{p} {times[sid][p]:.2f}s" for p in PHASES))
    last_merge = max(parse_iso(e.at) for e in events if isinstance(e.event, StoryMerged))
    run_end = (parse_iso(events[-1].at) - last_merge).total_seconds()
    print(f"{'run end':>14} {'':>13} {run_end:>25.2f}s   (the last merge to RunEnded)")
    accounted = run_end + sum(
        times[s][p] for s in chain if s in times for p in PHASES if p != "turn overhead"
    )
    print(
        f"{'all phases':>14} {'':>13} {accounted:>25.2f}s   (the makespan along the chain: {makespan:.2f}s)"
    )
    if args.timeline:
        print("the run's start, to its first story's start:")
        run_start(events)
        print(f"story {args.timeline}:")
        timeline(events, args.timeline)
    overhead = [t["start"] + t["turn overhead"] + t["review"] + t["merge"] for t in times.values()]
    print(f"flowd's own time per story (all but the coder turn): median {statistics.median(overhead):.2f} s")
    if args.profile:
        windows = between_turns(events)
        step_probes.table({s: windows[s] for s in chain if s in windows}, "the critical chain")
        step_probes.table(windows, "every story")
    return makespan / bound


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--stories", type=int, default=20)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--window", type=int, default=8, help="how far back a dependency may be")
    parser.add_argument("--dep-p", type=float, default=0.15, help="the chance of each dependency")
    parser.add_argument("--runs", type=int, default=1, help="run the epic this many times")
    parser.add_argument("--target", type=float, default=1.15)
    parser.add_argument(
        "--epic-gate-s", type=float, default=0.0, help="the epic gate's seconds (default: `true` everywhere)"
    )
    parser.add_argument("--profile", action="store_true", help="time flowd's steps between turns")
    parser.add_argument("--timeline", metavar="STORY", help="also print one story's events with their times")
    args = parser.parse_args()
    if args.profile:
        step_probes.install()
    ratios = []
    for n in range(args.runs):
        if args.runs > 1:
            print(f"== run {n + 1} of {args.runs}")
        ratios.append(one_run(args))
    if args.runs > 1:
        print(
            f"ratios {' '.join(f'{r:.2f}x' for r in ratios)}: median {statistics.median(ratios):.3f}x "
            f"(target <= {args.target}x)"
        )


if __name__ == "__main__":
    main()
