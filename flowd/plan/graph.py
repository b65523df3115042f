"""Questions about a plan's dependency graph: waves, what is ready, who depends on whom.

Plan order is the tie-breaker everywhere (ready order, dependents order), as in the original.
Functions tolerate invalid plans (cycles, unknown ids) without looping, though callers validate
first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from flowd.plan.model import Story, StoryPlan


def waves(plan: StoryPlan) -> list[list[str]]:
    """Repeatedly take, in plan order, every story whose dependencies are all placed.

    Stops when a pass places nothing, so cycle members and anything behind them are left out.
    Wave `n` (from 1) is `waves(plan)[n - 1]`.
    """
    placed: set[str] = set()
    remaining = list(plan.stories)
    result: list[list[str]] = []
    while remaining:
        wave = [s.id for s in remaining if all(d in placed for d in s.depends_on)]
        if not wave:
            break
        placed.update(wave)
        result.append(wave)
        remaining = [s for s in remaining if s.id not in placed]
    return result


def wave_of(plan: StoryPlan) -> dict[str, int]:
    """Story id to its wave number (from 1); stories in or behind a cycle are absent."""
    return {story_id: n for n, wave in enumerate(waves(plan), start=1) for story_id in wave}


def ready(
    plan: StoryPlan,
    done: Iterable[str] = (),
    failed: Iterable[str] = (),
    waiting: Iterable[str] = (),
    running: Iterable[str] = (),
) -> list[str]:
    """Stories, in plan order, not done/failed/waiting/running whose every dependency is done."""
    done_set = set(done)
    busy = done_set | set(failed) | set(waiting) | set(running)
    return [s.id for s in plan.stories if s.id not in busy and all(d in done_set for d in s.depends_on)]


def dependents_of(plan: StoryPlan, story_id: str) -> list[str]:
    """Transitive dependents of `story_id`, in plan order, without `story_id` itself."""
    found = {story_id}
    changed = True
    while changed:
        changed = False
        for s in plan.stories:
            if s.id not in found and any(d in found for d in s.depends_on):
                found.add(s.id)
                changed = True
    return [s.id for s in plan.stories if s.id in found and s.id != story_id]


def dependencies_of(plan: StoryPlan, story_id: str) -> list[str]:
    """Transitive dependencies of `story_id`, in plan order, without `story_id` itself."""
    by_id = {s.id: s for s in reversed(plan.stories)}  # first wins on duplicates
    found: set[str] = set()
    todo = list(by_id[story_id].depends_on) if story_id in by_id else []
    while todo:
        dep = todo.pop()
        if dep in found or dep not in by_id:
            continue
        found.add(dep)
        todo.extend(by_id[dep].depends_on)
    return [s.id for s in plan.stories if s.id in found and s.id != story_id]


def critical_path_rank(plan: StoryPlan, weights: Mapping[str, float] | None = None) -> dict[str, float]:
    """For each story, the length of the longest chain of dependents starting at it.

    A story nothing depends on ranks its own weight (1 by default); a story ranks its weight plus
    the highest rank among its direct dependents. Launching the highest rank first shortens the
    epic. A cycle contributes nothing beyond the first visit, so the function always ends.
    """
    return rank_of_graph({s.id: list(s.depends_on) for s in plan.stories}, weights)


def _dependents(depends: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    dependents: dict[str, list[str]] = {story_id: [] for story_id in depends}
    for story_id, deps in depends.items():
        for d in deps:
            if d in dependents and d != story_id and story_id not in dependents[d]:
                dependents[d].append(story_id)
    return dependents


def rank_of_graph(
    depends: Mapping[str, Sequence[str]], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """`critical_path_rank` of a graph given as story id → its dependencies (in plan order)."""
    dependents = _dependents(depends)
    rank: dict[str, float] = {}
    visiting: set[str] = set()

    def weight(story_id: str) -> float:
        return 1 if weights is None else weights.get(story_id, 1)

    for root in dependents:
        if root in rank:
            continue
        # Iterative post-order walk over dependents.
        stack: list[tuple[str, int]] = [(root, 0)]
        visiting.add(root)
        while stack:
            story_id, k = stack[-1]
            children = dependents[story_id]
            if k < len(children):
                stack[-1] = (story_id, k + 1)
                child = children[k]
                if child not in rank and child not in visiting:
                    visiting.add(child)
                    stack.append((child, 0))
                continue
            stack.pop()
            visiting.discard(story_id)
            rank[story_id] = weight(story_id) + max((rank.get(c, 0) for c in children), default=0)
    return rank


def critical_path(depends: Mapping[str, Sequence[str]], rank: Mapping[str, float]) -> list[str]:
    """The chain the epic's length hangs on: from the highest-ranked story with no dependency,
    each step to its highest-ranked dependent (plan order breaking ties), to a story nothing
    depends on. Empty for an empty graph."""
    dependents = _dependents(depends)
    roots = [s for s, deps in depends.items() if not [d for d in deps if d in depends and d != s]]
    if not roots:
        return []
    path = [max(roots, key=lambda s: rank.get(s, 0))]  # max keeps the first of equals: plan order
    while dependents.get(path[-1]):
        step = max(dependents[path[-1]], key=lambda s: rank.get(s, 0))
        if step in path:
            break  # a cycle (an invalid plan): stop rather than loop
        path.append(step)
    return path


def launch_order(plan: StoryPlan, ready_ids: Iterable[str], rank: Mapping[str, float]) -> list[str]:
    """`ready_ids` with the longest chain first, plan order breaking ties."""
    position = {s.id: i for i, s in reversed(list(enumerate(plan.stories)))}
    ids = list(dict.fromkeys(ready_ids))
    return sorted(ids, key=lambda story_id: (-rank.get(story_id, 0), position.get(story_id, len(position))))


# -- duration estimates (docs/performance.md: scheduling) -----------------------------------------
# A story's size in "units": one for the story itself, one per owned path, two per acceptance
# criterion, one per 400 characters of description. The weights were fitted by eye to the bundled
# demo and to bench/scheduler.py's plans; only their ratios matter when no story has a history.
SIZE_BASE = 1.0
SIZE_PER_OWNED = 1.0
SIZE_PER_ACCEPTANCE = 2.0
SIZE_CHARS_PER_UNIT = 400.0


def story_size(story: Story) -> float:
    """How big a story looks from its plan entry, in size units."""
    return (
        SIZE_BASE
        + SIZE_PER_OWNED * len(story.owned)
        + SIZE_PER_ACCEPTANCE * len(story.acceptance)
        + len(story.description) / SIZE_CHARS_PER_UNIT
    )


def estimate_durations(plan: StoryPlan, history: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each story's expected duration, for `critical_path_rank` weights.

    A story measured in an earlier run (`history`: story id → seconds from start to merge) is
    expected to take that long again. The others are scaled from their size by the median seconds
    per size unit of the plan's measured stories; with none measured, durations are size units
    (the ranking needs only their ratios)."""
    history = history or {}
    sizes = {s.id: story_size(s) for s in plan.stories}
    rates = sorted(
        history[story_id] / size for story_id, size in sizes.items() if history.get(story_id, 0) > 0
    )
    per_unit = rates[len(rates) // 2] if rates else 1.0
    return {
        story_id: history[story_id] if history.get(story_id, 0) > 0 else size * per_unit
        for story_id, size in sizes.items()
    }
