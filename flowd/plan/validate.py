"""Every rule of a story plan (docs/plan-format.md), all reported in one pass.

Texts follow the original system's (operators and tests grep them); codes are the `plan.*`
diagnostic codes the language server shows. An invalid plan touches nothing, so callers validate
before any git or file work.
"""

from __future__ import annotations

import difflib
import re

from flowd.base import paths
from flowd.plan.jsonpos import Positions
from flowd.plan.model import ID_PATTERN, StoryPlan
from flowd.plan.violation import Violation

__all__ = ["Violation", "violations"]

_ID = re.compile(ID_PATTERN)


# A violation and the index of its story in the plan (None: the epic's own), for placing it.
Found = tuple[Violation, int | None]


def violations(plan: StoryPlan, positions: Positions | None = None) -> list[Violation]:
    """Every violation of `plan`, in a stable order; positioned when `positions` are given."""
    found: list[Found] = []
    if not _ID.match(plan.epic_id):
        message = f"epic id '{plan.epic_id}' is not kebab-case (lowercase letters, digits and '-')"
        found.append((Violation(code="plan.badEpicId", message=message, field="epicId"), None))
    known = {s.id for s in plan.stories}
    seen: set[str] = set()
    for i, story in enumerate(plan.stories):
        found += _id_rules(plan, i, seen)
        seen.add(story.id)
        if not story.owned:
            found.append(_of(plan, i, "plan.ownsNothing", f"story '{story.id}' owns no paths", "owned"))
        found += _dependency_rules(plan, i, known)
        found += _path_rules(plan, i)
    found += _overlap_rules(plan)
    for cycle, at, item in _cycles(plan):
        found.append(
            _of(plan, at, "plan.cycle", "dependency cycle: " + " -> ".join(cycle), "dependsOn", item)
        )
    return [_placed(violation, index, positions) for violation, index in found]


def _of(
    plan: StoryPlan, index: int, code: str, message: str, field: str | None = None, item: int | None = None
) -> Found:
    story = plan.stories[index].id
    return Violation(code=code, message=message, story=story, field=field, item=item), index


def _id_rules(plan: StoryPlan, i: int, seen: set[str]) -> list[Found]:
    """A story id met before (`seen`: the ids of the stories before it), or not kebab-case."""
    story_id = plan.stories[i].id
    found = []
    if story_id in seen:
        found.append(_of(plan, i, "plan.duplicateId", f"duplicate story id '{story_id}'", "id"))
    if not _ID.match(story_id):
        found.append(_of(plan, i, "plan.badId", f"story id '{story_id}' is not kebab-case", "id"))
    return found


def _dependency_rules(plan: StoryPlan, i: int, known: set[str]) -> list[Found]:
    """A story that depends on itself or on a story the plan lacks (with the nearest id as a hint)."""
    story_id = plan.stories[i].id
    found = []
    for k, dep in enumerate(plan.stories[i].depends_on):
        if dep == story_id:
            found.append(
                _of(plan, i, "plan.dependsOnItself", f"story '{story_id}' depends on itself", "dependsOn", k)
            )
        elif dep not in known:
            close = difflib.get_close_matches(dep, sorted(known - {story_id}), n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            message = f"story '{story_id}' depends on unknown story '{dep}'{hint}"
            found.append(_of(plan, i, "plan.unknownDependency", message, "dependsOn", k))
    return found


def _path_rules(plan: StoryPlan, i: int) -> list[Found]:
    """Owned paths that overlap the story's own shared read-only ones; any unsafe path."""
    story = plan.stories[i]
    found = []
    for owned in story.owned:
        for k, shared in enumerate(story.shared_read_only):
            if paths.is_safe(owned) and paths.is_safe(shared) and paths.overlapping(owned, shared):
                message = f"story '{story.id}' both owns '{owned}' and declares '{shared}' shared read-only"
                found.append(_of(plan, i, "plan.ownsShared", message, "sharedReadOnly", k))
    for field, values in (
        ("owned", story.owned),
        ("sharedReadOnly", story.shared_read_only),
        ("readFirst", story.read_first),
    ):
        for k, value in enumerate(values):
            reason = paths.unsafe_reason(value)
            if reason is not None:
                message = f"story '{story.id}' {field} path '{value}' {reason}"
                found.append(_of(plan, i, "plan.unsafePath", message, field, k))
    return found


def _overlap_rules(plan: StoryPlan) -> list[Found]:
    """Two stories owning overlapping paths, reported on the later one."""
    stories = plan.stories
    found = []
    for i, ka, j, kb in _overlaps(plan):
        a, b = stories[i], stories[j]
        message = (
            f"stories '{a.id}' and '{b.id}' both own "
            f"'{paths.normalize(a.owned[ka])}' / '{paths.normalize(b.owned[kb])}'"
        )
        found.append(_of(plan, j, "plan.overlap", message, "owned", kb))
    return found


def _placed(violation: Violation, story_index: int | None, positions: Positions | None) -> Violation:
    """The violation at its line and column in the plan file, when its positions are known."""
    if positions is None:
        return violation
    if story_index is not None:
        return violation.at(positions.story(story_index, violation.field, violation.item))
    return violation.at(positions.keys.get((violation.field or "",)) or positions.values.get(()))


def _cycles(plan: StoryPlan) -> list[tuple[list[str], int, int]]:
    """Each back edge of a depth-first search in plan order: (cycle path, story index, dependsOn item).

    Self-edges and unknown targets are skipped (reported already). Iterative, so a long chain
    cannot exhaust the recursion limit.
    """
    first: dict[str, int] = {}
    for i, story in enumerate(plan.stories):
        first.setdefault(story.id, i)
    state: dict[str, int] = {}  # 1 visiting, 2 done
    found: list[tuple[list[str], int, int]] = []
    for root in plan.stories:
        if root.id in state:
            continue
        trail: list[str] = [root.id]
        state[root.id] = 1
        stack: list[tuple[int, int]] = [(first[root.id], 0)]  # (story index, next dependsOn item)
        while stack:
            index, k = stack[-1]
            deps = plan.stories[index].depends_on
            if k >= len(deps):
                stack.pop()
                state[trail.pop()] = 2
                continue
            stack[-1] = (index, k + 1)
            dep = deps[k]
            if dep == plan.stories[index].id or dep not in first:
                continue
            mark = state.get(dep)
            if mark == 1:
                start = trail.index(dep)
                found.append(([*trail[start:], dep], index, k))
            elif mark is None:
                state[dep] = 1
                trail.append(dep)
                stack.append((first[dep], 0))
    return found


def _overlaps(plan: StoryPlan) -> list[tuple[int, int, int, int]]:
    """Pairs of overlapping owned entries of different stories: (i, item in i, j, item in j), i < j.

    Two prefixes overlap when one is a segment-ancestor of (or equal to) the other, so each entry
    looks up its own ancestors in a table instead of comparing every pair: linear in the number
    of path segments, which keeps a plan of thousands of stories quick to check.
    """
    by_prefix: dict[str, list[tuple[int, int]]] = {}
    entries: list[tuple[str, int, int]] = []
    for i, story in enumerate(plan.stories):
        for k, owned in enumerate(story.owned):
            if paths.is_safe(owned):
                prefix = paths.as_prefix(owned)
                by_prefix.setdefault(prefix, []).append((i, k))
                entries.append((prefix, i, k))
    found: set[tuple[int, int, int, int]] = set()
    for prefix, i, k in entries:
        segments = prefix.split("/")
        for n in range(1, len(segments) + 1):
            for oi, ok in by_prefix.get("/".join(segments[:n]), ()):
                if oi == i or plan.stories[oi].id == plan.stories[i].id:
                    continue  # same story, or a duplicate id already reported
                found.add((oi, ok, i, k) if oi < i else (i, k, oi, ok))
    return sorted(found, key=lambda t: (t[0], t[2], t[1], t[3]))
