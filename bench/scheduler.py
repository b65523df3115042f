"""Makespan of flowd's launch policy on seeded random story DAGs, against plan-order launch.

Simulates a run with scripted story durations through the scheduler's own functions
(`flowd.plan.graph.ready` and `launch_order` over `critical_path_rank`), and prints, per seed,
each policy's makespan as a ratio to the lower bound max(critical path, total work / lanes).
Target: critical-path launch <= 1.10 on every seed.

    .venv/bin/python bench/scheduler.py [--seeds 20] [--lanes 4]
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable

from flowd.plan.graph import critical_path_rank, launch_order, ready
from flowd.plan.model import Story, StoryPlan

Policy = Callable[[StoryPlan, list[str]], list[str]]


def random_plan(rng: random.Random) -> tuple[StoryPlan, dict[str, int]]:
    n = rng.randint(20, 60)
    stories: list[Story] = []
    durations: dict[str, int] = {}
    for i in range(n):
        sid = f"s{i:02d}"
        # Mostly shallow fan-in from recent stories, like real epics (a few long chains).
        deps = sorted({f"s{j:02d}" for j in range(max(0, i - 8), i) if rng.random() < 0.12})
        stories.append(Story(id=sid, title=sid, owned=[f"src/{sid}/"], depends_on=deps))
        durations[sid] = rng.randint(2, 12)
    return StoryPlan(epic_id="bench", epic="bench", stories=stories), durations


def simulate(plan: StoryPlan, durations: dict[str, int], lanes: int, policy: Policy) -> int:
    done: set[str] = set()
    running: dict[str, int] = {}
    events: list[tuple[int, str]] = []
    now = 0
    while True:
        for sid in policy(plan, ready(plan, done, (), (), running))[: lanes - len(running)]:
            running[sid] = now + durations[sid]
            heapq.heappush(events, (running[sid], sid))
        if not events:
            return now
        now, sid = heapq.heappop(events)
        del running[sid]
        done.add(sid)


def lower_bound(plan: StoryPlan, durations: dict[str, int], lanes: int) -> float:
    longest: dict[str, int] = {}
    for story in plan.stories:  # plan order is topological here
        longest[story.id] = durations[story.id] + max((longest[d] for d in story.depends_on), default=0)
    return max(max(longest.values()), sum(durations.values()) / lanes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--lanes", type=int, default=4)
    args = parser.parse_args()
    print(
        f"{'seed':>4} {'stories':>7} {'lower':>6} {'critical-path':>13} {'plan-order':>10} {'cp(weighted)':>12}"
    )
    worst = {"cp": 0.0, "plan": 0.0, "weighted": 0.0}
    for seed in range(args.seeds):
        rng = random.Random(seed)
        plan, durations = random_plan(rng)
        bound = lower_bound(plan, durations, args.lanes)
        rank = critical_path_rank(plan)  # what the engine uses: it does not know durations
        weighted = critical_path_rank(plan, durations)  # an oracle that knows them, for reference
        cp = simulate(plan, durations, args.lanes, lambda p, ids, r=rank: launch_order(p, ids, r)) / bound
        po = simulate(plan, durations, args.lanes, lambda p, ids: list(ids)) / bound
        wt = simulate(plan, durations, args.lanes, lambda p, ids, w=weighted: launch_order(p, ids, w)) / bound
        worst = {
            "cp": max(worst["cp"], cp),
            "plan": max(worst["plan"], po),
            "weighted": max(worst["weighted"], wt),
        }
        print(f"{seed:>4} {len(plan.stories):>7} {bound:>6.1f} {cp:>13.3f} {po:>10.3f} {wt:>12.3f}")
    verdict = "met" if worst["cp"] <= 1.10 else "NOT met"
    print(
        f"worst ratio to the lower bound over {args.seeds} seeds, {args.lanes} lanes: critical-path {worst['cp']:.3f}, "
        f"plan-order {worst['plan']:.3f}, duration-weighted {worst['weighted']:.3f}; target <= 1.10: {verdict}"
    )


if __name__ == "__main__":
    main()
