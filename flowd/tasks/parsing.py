"""What a planner writes at the end of a task description (docs/prompts.md).

- `Satisfies: 1, 2`: which acceptance criteria the task serves (informational, for dashboards).
- `Depends on: 1, 3` or `none`: the task graph; the default is every earlier task, so a plan
  without these lines runs strictly in order.
- `Owns: src/a.py, src/b/`: the paths a task run aside (in parallel) may change.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from pydantic import BaseModel, ConfigDict

from flowd.tasks.model import Task, TaskPlan

_SATISFIES = re.compile(r"\bsatisfies:([^\n]*)", re.IGNORECASE)
_DEPENDS = re.compile(r"\bdepends\s+on:([^\n.]*)", re.IGNORECASE)
# A lazy capture ending at the next `Depends on:`/`Satisfies:`, a sentence end, a newline or the end.
_OWNS = re.compile(
    r"\bowns:(.*?)(?=\s+(?:depends\s+on:|satisfies:)|\.\s|\.\Z|\n|\Z)",
    re.IGNORECASE | re.DOTALL,
)
_NONE = re.compile(r"^\s*none\b", re.IGNORECASE)


def satisfies(description: str) -> list[int]:
    """Every integer above 0 on the `Satisfies:` line, in order; `[]` when none."""
    match = _SATISFIES.search(description)
    if match is None:
        return []
    return [n for n in (int(d) for d in re.findall(r"\d+", match.group(1))) if n > 0]


def depends_on(description: str, index: int) -> list[int]:
    """The 1-based tasks task `index` waits for.

    Default (no line, or a line naming no valid earlier task): every earlier task. `none`: no task.
    Forward and self references are dropped, so the graph is acyclic by construction.
    """
    default = list(range(1, index))
    match = _DEPENDS.search(description)
    if match is None:
        return default
    captured = match.group(1)
    if _NONE.match(captured):
        return []
    return _explicit(captured, index) or default


def _explicit(captured: str, index: int) -> list[int]:
    """The valid earlier tasks a `Depends on:` capture names, de-duplicated in first-seen order."""
    found: list[int] = []
    for n in (int(d) for d in re.findall(r"\d+", captured)):
        if 1 <= n < index and n not in found:
            found.append(n)
    return found


_NEXT_LINE_KEY = re.compile(r"\b(?:owns|satisfies):", re.IGNORECASE)


def with_depends_on(description: str, index: int, deps: list[int]) -> str:
    """`description` with what its `Depends on:` line names replaced by `deps` (`none` when empty);
    an `Owns:` or `Satisfies:` later on the same line is kept. A description that has no such line,
    says `none`, or names no valid earlier task (so waits for every earlier one) is unchanged."""
    match = _DEPENDS.search(description)
    if match is None or _NONE.match(match.group(1)) or not _explicit(match.group(1), index):
        return description
    key = _NEXT_LINE_KEY.search(match.group(1))
    end = match.start(1) + key.start() if key else match.end(1)
    text = " " + (", ".join(str(d) for d in deps) or "none") + (" " if key else "")
    return description[: match.start(1)] + text + description[end:]


def owns(description: str) -> list[str]:
    """The paths on the `Owns:` line; `[]` when there is none (the task may touch the story's paths)."""
    match = _OWNS.search(description)
    if match is None:
        return []
    found: list[str] = []
    for piece in re.split(r"[,\s]+", match.group(1)):
        p = piece.strip().strip("`").rstrip(".;").strip("`")
        if p and p.lower() != "none" and p not in found:
            found.append(p)
    return found


class TaskNode(BaseModel):
    """A task in the story's task graph."""

    model_config = ConfigDict(frozen=True)

    index: int  # 1-based
    task: Task
    depends_on: list[int]
    owns: list[str]
    satisfies: list[int]


def task_nodes(plan: TaskPlan) -> list[TaskNode]:
    return [
        TaskNode(
            index=i,
            task=task,
            depends_on=depends_on(task.description, i),
            owns=owns(task.description),
            satisfies=satisfies(task.description),
        )
        for i, task in enumerate(plan.tasks, start=1)
    ]


def has_parallel_tasks(plan: TaskPlan | list[TaskNode]) -> bool:
    """True when some task after the first does not wait for the task right before it."""
    nodes = task_nodes(plan) if isinstance(plan, TaskPlan) else plan
    return any(node.index > 1 and (node.index - 1) not in node.depends_on for node in nodes)


def ready_tasks(nodes: list[TaskNode], done: Collection[int], running: Collection[int] = ()) -> list[int]:
    """Indexes of tasks not done or running whose dependencies are all done, in plan order."""
    return [
        n.index
        for n in nodes
        if n.index not in done and n.index not in running and all(d in done for d in n.depends_on)
    ]
