"""Which changed paths break a story's perimeter, and who owns or shares a path.

Pure: callers hand in the changed paths (from git) and the plan. Paths under `.flow/` are flowd's
own state and never count against a story.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel

from flowd.base import paths
from flowd.events.model import PerimeterPath
from flowd.plan.model import StoryPlan
from flowd.tasks.model import TaskPlan

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


# --- Paths named in prose: stray task detection (docs/prompts.md) -------------------------

_TOKEN = re.compile(r"[A-Za-z0-9_.@/\\-]+")
_FILE_LIKE = re.compile(r"\.[A-Za-z0-9]{1,5}$")


def paths_named_in(plan: StoryPlan, text: str) -> list[str]:
    """Repository paths a piece of prose names, by a heuristic that avoids false alarms.

    A token with `/` counts only when its first segment is a root of some owned or read-only
    entry (so `en/it` or a URL does not); a bare file name (`App.tsx`) resolves to every owned
    file entry with that base name.
    """
    entries = [p for s in plan.stories for p in (*s.owned, *s.shared_read_only) if paths.is_safe(p)]
    roots = {paths.normalize(p).split("/", 1)[0] for p in entries}
    owned_files = [paths.normalize(p) for s in plan.stories for p in s.owned if paths.is_safe(p)]
    owned_files = [p for p in owned_files if _FILE_LIKE.search(p.rsplit("/", 1)[-1])]
    found: list[str] = []
    for match in _TOKEN.finditer(text):
        # A URL's path comes out as `//host/...`: its empty first segment is no root, so it is skipped.
        token = paths.normalize(match.group(0).rstrip(".,:;"))
        if not token:
            continue
        if "/" in token:
            if token.split("/", 1)[0] in roots and token not in found:
                found.append(token)
        elif _FILE_LIKE.search(token):
            for file in owned_files:
                if file.rsplit("/", 1)[-1] == token and file not in found:
                    found.append(file)
    return found


class StrayTask(BaseModel):
    """An incomplete task naming paths its story may not touch."""

    index: int  # 1-based
    title: str
    paths: list[str]
    foreign: bool  # some of those paths are owned by another story


def stray_tasks(plan: StoryPlan, story_id: str, tasks: TaskPlan) -> list[StrayTask]:
    """Incomplete tasks whose title or description names paths outside the story's perimeter.

    Allowed: paths within an owned or shared read-only entry, and folders that are ancestors of
    an owned entry (naming a folder says where, not what is changed).
    """
    story = plan.story(story_id)
    owned = [p for p in story.owned if paths.is_safe(p)] if story else []
    shared = [p for p in story.shared_read_only if paths.is_safe(p)] if story else []
    found: list[StrayTask] = []
    for index, task in enumerate(tasks.tasks, start=1):
        if task.completed:
            continue
        bad = [
            p
            for p in paths_named_in(plan, f"{task.title}\n{task.description}")
            if not paths.within_any(p, owned)
            and not paths.within_any(p, shared)
            and not (not paths.looks_like_file(p) and any(paths.within(o, p) for o in owned))
        ]
        if bad:
            foreign = any((owner_of_path(plan, p) or story_id) != story_id for p in bad)
            found.append(StrayTask(index=index, title=task.title, paths=bad, foreign=foreign))
    return found


def prune_read_first(plan: StoryPlan, tracked: Iterable[str]) -> tuple[StoryPlan, list[tuple[str, str]]]:
    """Drop `readFirst` anchors that are unsafe or name no tracked file (a folder counts).

    Returns the plan (the same object when nothing was dropped) and the dropped (story, path).
    """
    files = [paths.normalize(f) for f in tracked]
    dropped: list[tuple[str, str]] = []
    stories = []
    for story in plan.stories:
        keep = [a for a in story.read_first if paths.is_safe(a) and any(paths.within(f, a) for f in files)]
        dropped += [(story.id, a) for a in story.read_first if a not in keep]
        stories.append(
            story if len(keep) == len(story.read_first) else story.model_copy(update={"read_first": keep})
        )
    if not dropped:
        return plan, []
    return plan.model_copy(update={"stories": stories}), dropped
