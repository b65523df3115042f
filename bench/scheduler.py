"""Makespan of flowd's launch policy on seeded random story DAGs, against plan-order launch.

Simulates a run with scripted story durations through the scheduler's own functions
(`flowd.plan.graph.ready` and `launch_order` over `critical_path_rank`), and prints, per seed,
each policy's makespan as a ratio to the lower bound max(critical path, total work / lanes):
plan order; critical path by story count (the old rule); critical path weighted by
`estimate_durations` from the stories' sizes alone (what a first run does: flowd's rule); the
same with half the stories measured in an earlier run (±25%); and true durations (an oracle).
Story sizes (owned paths, acceptance criteria, description) follow the true duration only
loosely (each off by a factor 0.6-1.6). Target: estimated <= 1.05 on every seed.

    .venv/bin/python bench/scheduler.py [--seeds 20] [--lanes 4]
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable

from flowd.plan.graph import critical_path_rank, estimate_durations, launch_order, ready
from flowd.plan.model import Story, StoryPlan

Policy = Callable[[StoryPlan, list[str]], list[str]]


def random_plan(rng: random.Random, noise: random.Random) -> tuple[StoryPlan, dict[str, int]]:
    # `rng` draws the same DAGs and durations as before sizes existed; `noise` draws the sizes.
    n = rng.randint(20, 60)
    stories: list[Story] = []
    durations: dict[str, int] = {}
    for i in range(n):
        sid = f"s{i:02d}"
        # Mostly shallow fan-in from recent stories, like real epics (a few long chains).
        deps = sorted({f"s{j:02d}" for j in range(max(0, i - 8), i) if rng.random() < 0.12})
        durations[sid] = rng.randint(2, 12)
        stories.append(sized_story(noise, sid, deps, durations[sid]))
    return StoryPlan(epic_id="bench", epic="bench", stories=stories), durations


def sized_story(rng: random.Random, sid: str, deps: list[str], duration: int) -> Story:
    """A plan entry whose size only loosely follows its true duration, as a planner writes them:
    paths, criteria and description each off by a random factor (0.6-1.6) or a path or two."""
    owned = [f"src/{sid}/m{k}.py" for k in range(max(1, round(duration / 3 * rng.uniform(0.6, 1.6))))]
    acceptance = [f"criterion {k}" for k in range(max(1, round(duration / 4 * rng.uniform(0.6, 1.6))))]
    description = "x" * int(duration * 120 * rng.uniform(0.6, 1.6))
    return Story(
        id=sid, title=sid, owned=owned, depends_on=deps, acceptance=acceptance, description=description
    )


def measured(rng: random.Random, durations: dict[str, int], share: float) -> dict[str, float]:
    """An earlier run's start-to-merge times for `share` of the stories, each off by up to 25%."""
    return {sid: d * rng.uniform(0.75, 1.25) for sid, d in durations.items() if rng.random() < share}


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
    columns = ("plan-order", "count-cp", "estimated", "est+history", "true-dur")
    print(f"{'seed':>4} {'stories':>7} {'lower':>6} " + " ".join(f"{c:>11}" for c in columns))
    worst = dict.fromkeys(columns, 0.0)
    for seed in range(args.seeds):
        rng, noise = random.Random(seed), random.Random(seed + 1000)
        plan, durations = random_plan(rng, noise)
        bound = lower_bound(plan, durations, args.lanes)
        ranks = {
            "count-cp": critical_path_rank(plan),  # the old rule: chain length in stories
            "estimated": critical_path_rank(plan, estimate_durations(plan)),  # sizes only (first run)
            # half the stories measured in an earlier run (with noise), the rest from their sizes
            "est+history": critical_path_rank(
                plan, estimate_durations(plan, measured(noise, durations, 0.5))
            ),
            "true-dur": critical_path_rank(plan, durations),  # an oracle that knows them, for reference
        }
        row: dict[str, float] = {
            "plan-order": simulate(plan, durations, args.lanes, lambda p, ids: list(ids)) / bound
        }
        for name, rank in ranks.items():
            policy: Policy = lambda p, ids, r=rank: launch_order(p, ids, r)  # noqa: E731
            row[name] = simulate(plan, durations, args.lanes, policy) / bound
        worst = {c: max(worst[c], row[c]) for c in columns}
        print(
            f"{seed:>4} {len(plan.stories):>7} {bound:>6.1f} " + " ".join(f"{row[c]:>11.3f}" for c in columns)
        )
    verdict = "met" if worst["estimated"] <= 1.05 else "NOT met"
    print(
        f"worst ratio to the lower bound over {args.seeds} seeds, {args.lanes} lanes: "
        + ", ".join(f"{c} {worst[c]:.3f}" for c in columns)
        + f"; target (estimated, no history) <= 1.05: {verdict}"
    )


if __name__ == "__main__":
    main()
