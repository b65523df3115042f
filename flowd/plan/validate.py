"""Every rule of a story plan (contract §2.1), all reported in one pass.

Texts follow the original system's (operators and tests grep them); codes are the `plan.*`
diagnostic codes the language server shows. An invalid plan touches nothing, so callers validate
before any git or file work.
"""

from __future__ import annotations

import re

from flowd import paths
from flowd.plan.jsonpos import Positions
from flowd.plan.model import ID_PATTERN, StoryPlan
from flowd.plan.violation import Violation

__all__ = ["Violation", "violations"]

_ID = re.compile(ID_PATTERN)


def violations(plan: StoryPlan, positions: Positions | None = None) -> list[Violation]:
    """Every violation of `plan`, in a stable order; positioned when `positions` are given."""
    found: list[tuple[Violation, int | None]] = []

    def add(
        code: str, message: str, index: int | None, field: str | None = None, item: int | None = None
    ) -> None:
        story = plan.stories[index].id if index is not None else None
        found.append((Violation(code=code, message=message, story=story, field=field, item=item), index))

    if not _ID.match(plan.epic_id):
        found.append(
            (
                Violation(
                    code="plan.badEpicId",
                    message=f"epic id '{plan.epic_id}' is not kebab-case (lowercase letters, digits and '-')",
                    field="epicId",
                ),
                None,
            )
        )

    known = {s.id for s in plan.stories}
    seen: set[str] = set()
    for i, story in enumerate(plan.stories):
        sid = story.id
        if sid in seen:
            add("plan.duplicateId", f"duplicate story id '{sid}'", i, "id")
        seen.add(sid)
        if not _ID.match(sid):
            add("plan.badId", f"story id '{sid}' is not kebab-case", i, "id")
        if not story.owned:
            add("plan.ownsNothing", f"story '{sid}' owns no paths", i, "owned")
        for k, dep in enumerate(story.depends_on):
            if dep == sid:
                add("plan.dependsOnItself", f"story '{sid}' depends on itself", i, "dependsOn", k)
            elif dep not in known:
                add(
                    "plan.unknownDependency",
                    f"story '{sid}' depends on unknown story '{dep}'",
                    i,
                    "dependsOn",
                    k,
                )
        for owned in story.owned:
            for k, shared in enumerate(story.shared_read_only):
                if paths.is_safe(owned) and paths.is_safe(shared) and paths.overlapping(owned, shared):
                    add(
                        "plan.ownsShared",
                        f"story '{sid}' both owns '{owned}' and declares '{shared}' shared read-only",
                        i,
                        "sharedReadOnly",
                        k,
                    )
        for field, values in (
            ("owned", story.owned),
            ("sharedReadOnly", story.shared_read_only),
            ("readFirst", story.read_first),
        ):
            for k, value in enumerate(values):
                reason = paths.unsafe_reason(value)
                if reason is not None:
                    add("plan.unsafePath", f"story '{sid}' {field} path '{value}' {reason}", i, field, k)

    stories = plan.stories
    for i, a in enumerate(stories):
        for j in range(i + 1, len(stories)):
            b = stories[j]
            if a.id == b.id:
                continue  # already a duplicate id; its overlaps would only repeat that
            for pa in a.owned:
                for k, pb in enumerate(b.owned):
                    if paths.is_safe(pa) and paths.is_safe(pb) and paths.overlapping(pa, pb):
                        add(
                            "plan.overlap",
                            f"stories '{a.id}' and '{b.id}' both own "
                            f"'{paths.normalize(pa)}' / '{paths.normalize(pb)}'",
                            j,
                            "owned",
                            k,
                        )

    for cycle, at, item in _cycles(plan):
        add("plan.cycle", "dependency cycle: " + " -> ".join(cycle), at, "dependsOn", item)

    result = []
    for violation, story_index in found:
        if positions is not None:
            span = (
                positions.story(story_index, violation.field, violation.item)
                if story_index is not None
                else positions.keys.get((violation.field or "",)) or positions.values.get(())
            )
            if span is not None:
                violation = violation.model_copy(
                    update={
                        "line": span.line,
                        "column": span.column,
                        "end_line": span.end_line,
                        "end_column": span.end_column,
                    }
                )
        result.append(violation)
    return result


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
