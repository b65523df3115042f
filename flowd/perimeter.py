"""Which changed paths break a story's perimeter, and who owns or shares a path.

Pure: callers hand in the changed paths (from git) and the plan. Paths under `.flow/` are flowd's
own state and never count against a story.
"""

from __future__ import annotations

from collections.abc import Iterable

from flowd import paths
from flowd.events import PerimeterPath
from flowd.plan.model import StoryPlan

STATE_DIR = ".flow"


def _is_state(path: str) -> bool:
    return paths.within(path, STATE_DIR)


def _covers(prefixes: Iterable[str], path: str) -> bool:
    # Unsafe entries (empty, absolute, `..`) make a plan invalid; never let one cover everything.
    return any(paths.is_safe(p) and paths.within(path, p) for p in prefixes)


def owner_of_path(plan: StoryPlan, path: str) -> str | None:
    """The first story that owns `path`, or None."""
    for story in plan.stories:
        if _covers(story.owned, path):
            return story.id
    return None


def shared_by(plan: StoryPlan, path: str) -> list[str]:
    """The stories, in plan order, that declare `path` shared read-only."""
    return [s.id for s in plan.stories if _covers(s.shared_read_only, path)]


def classify(changed: Iterable[str], story_id: str, plan: StoryPlan) -> list[PerimeterPath]:
    """The changed paths story `story_id` may not change, each with why.

    `sharedReadOnly`: the story itself declared it read-only. `foreignOwned`: another story owns it.
    `outside`: nobody owns it and it is not the story's. Changed order is kept, duplicates dropped.
    """
    story = plan.story(story_id)
    owned = story.owned if story else []
    shared = story.shared_read_only if story else []
    found: list[PerimeterPath] = []
    seen: set[str] = set()
    for raw in changed:
        path = paths.normalize(raw)
        if not path or path in seen or _is_state(path):
            continue
        seen.add(path)
        if _covers(shared, path):
            found.append(PerimeterPath(path=path, kind="sharedReadOnly"))
        elif _covers(owned, path):
            continue
        else:
            owner = owner_of_path(plan, path)
            foreign = owner is not None and owner != story_id
            found.append(PerimeterPath(path=path, kind="foreignOwned" if foreign else "outside"))
    return found


def task_owns_violations(changed: Iterable[str], owns: list[str]) -> list[str]:
    """Changed paths outside a parallel task's `Owns:` list (empty `owns` allows everything).

    Glob tails are prefixes: `src/session/*` and `src/routes/**` cover everything under them.
    """
    if not owns:
        return []
    out: list[str] = []
    for raw in changed:
        path = paths.normalize(raw)
        if path and not _is_state(path) and not paths.within_any(path, owns) and path not in out:
            out.append(path)
    return out
