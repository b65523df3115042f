from __future__ import annotations

import pytest

from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import depends_on, has_parallel_tasks, owns, ready_tasks, satisfies, task_nodes


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("Do it.\nSatisfies: 1, 2", [1, 2]),
        ("satisfies: 3 and 0 and 12", [3, 12]),
        ("SATISFIES:2\nSatisfies: 9", [2]),
        ("Satisfies: none", []),
        ("no line", []),
        ("unsatisfies: 1", []),
    ],
)
def test_satisfies(description: str, expected: list[int]) -> None:
    assert satisfies(description) == expected


@pytest.mark.parametrize(
    ("description", "index", "expected"),
    [
        ("no line", 4, [1, 2, 3]),
        ("no line", 1, []),
        ("Depends on: none", 3, []),
        ("depends on:  None yet", 3, []),
        ("Depends on: 1", 3, [1]),
        ("Depends on: 2, 1, 2", 4, [2, 1]),
        ("Depends on: 1, 3, 4", 3, [1]),  # self and forward references are dropped
        ("Depends on: 5", 3, [1, 2]),  # nothing valid: the default
        ("Depends on: 1. Also 2", 3, [1]),  # a period ends the capture
        ("Depends on: tasks 1\nand 2", 3, [1]),
        ("Owns: a.py Depends on: 2", 3, [2]),
    ],
)
def test_depends_on(description: str, index: int, expected: list[int]) -> None:
    assert depends_on(description, index) == expected


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("no line", []),
        ("Owns: src/a.ts, src/b.ts.", ["src/a.ts", "src/b.ts"]),
        ("Owns: `src/a.ts`, `src/b/`; then more", ["src/a.ts", "src/b/", "then", "more"]),
        ("Owns: src/a.py Depends on: 1", ["src/a.py"]),
        ("Owns: src/a.py Satisfies: 1", ["src/a.py"]),
        ("Owns: src/a.py. Then the rest", ["src/a.py"]),
        ("Owns: src/a.py\nDepends on: none", ["src/a.py"]),
        ("Owns: none", []),
        ("owns: src/x/**, src/y/*", ["src/x/**", "src/y/*"]),
        ("Owns: a.py, a.py", ["a.py"]),
    ],
)
def test_owns(description: str, expected: list[str]) -> None:
    assert owns(description) == expected


def tasks(*descriptions: str) -> TaskPlan:
    return TaskPlan(
        story_id="s", tasks=[Task(title=f"t{i}", description=d) for i, d in enumerate(descriptions, 1)]
    )


def test_task_nodes() -> None:
    nodes = task_nodes(tasks("Owns: a.py\nSatisfies: 1", "Depends on: none\nOwns: b.py", "x"))
    assert [(n.index, n.depends_on, n.owns, n.satisfies) for n in nodes] == [
        (1, [], ["a.py"], [1]),
        (2, [], ["b.py"], []),
        (3, [1, 2], [], []),
    ]
    assert ready_tasks(nodes, done=set()) == [1, 2]
    assert ready_tasks(nodes, done={1}, running={2}) == []
    assert ready_tasks(nodes, done={1, 2}) == [3]


@pytest.mark.parametrize(
    ("descriptions", "parallel"),
    [
        (("a", "b", "c"), False),
        (("a", "Depends on: 1", "Depends on: 2"), False),
        (("a", "Depends on: none"), True),
        (("a", "b", "Depends on: 1"), True),
        (("Depends on: none",), False),
    ],
)
def test_has_parallel_tasks(descriptions: tuple[str, ...], parallel: bool) -> None:
    assert has_parallel_tasks(tasks(*descriptions)) is parallel
    assert has_parallel_tasks(task_nodes(tasks(*descriptions))) is parallel
