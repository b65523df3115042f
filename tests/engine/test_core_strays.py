"""Perimeter-aware planning as tables (engine/core/strays.py): which first plans are planned once
more, and what the second plan keeps, drops and renumbers."""

from __future__ import annotations

import pytest

from flowd.engine.core.strays import Keep, Replan, Settled, after_plan, after_replan
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import depends_on, with_depends_on
from tests.plan.helpers import plan, story

# `app` owns a feature folder; `shell` owns App.tsx (the case); nobody owns src/other/.
PLAN = plan(
    story("app", owned=["src/features/conto/", "src/conto.ts"], sharedReadOnly=["src/kit/theme.ts"]),
    story("shell", owned=["src/App.tsx"]),
    story("docs", owned=["docs/"]),
)


def tasks(*items: tuple[str, str] | tuple[str, str, bool]) -> TaskPlan:
    """A task plan of story `app`: (title, description[, completed])."""
    return TaskPlan(
        story_id="app",
        tasks=[Task(title=i[0], description=i[1], completed=len(i) > 2 and bool(i[2])) for i in items],
    )


OWN = ("Overview", "Build src/features/conto/overview.tsx")
REGISTER = ("Register contoOverviewFeature in App.tsx", "Add the route to the shell.")
NOBODY = ("Helper", "Put the helper in src/other/util.ts")


@pytest.mark.parametrize(
    ("case", "planned", "strays"),
    [
        ("inside the owned paths", tasks(OWN, ("Export", "Export it from src/conto.ts")), None),
        ("a shared read-only path is read, not a stray", tasks(("Theme", "Read src/kit/theme.ts")), None),
        (
            "a folder holding an owned path is a location",
            tasks(("Where", "Work in src/ and src/features/")),
            None,
        ),
        ("naming no path at all", tasks(("Think", "Decide the layout.")), None),
        ("a completed task is not checked", tasks((*REGISTER, True), OWN), None),
        ("another story's file, by its bare name", tasks(OWN, REGISTER), [(2, ["src/App.tsx"], True)]),
        ("a path no story owns", tasks(NOBODY, OWN), [(1, ["src/other/util.ts"], False)]),
        (
            "each stray task once, with all its paths",
            tasks(("Both", "Edit docs/conto.md and src/other/x.ts"), REGISTER),
            [(1, ["docs/conto.md", "src/other/x.ts"], True), (2, ["src/App.tsx"], True)],
        ),
    ],
)
def test_the_first_plan_is_kept_or_planned_once_more(
    case: str, planned: TaskPlan, strays: list[tuple[int, list[str], bool]] | None
) -> None:
    decision = after_plan(PLAN, "app", planned)
    if strays is None:
        assert decision == Keep(planned), case
    else:
        assert isinstance(decision, Replan), case
        assert [(s.index, s.paths, s.foreign) for s in decision.strays] == strays, case


def test_the_replan_info_lists_each_stray_task() -> None:
    decision = after_plan(PLAN, "app", tasks(OWN, REGISTER, NOBODY))
    assert isinstance(decision, Replan)
    assert decision.message == (
        "the task plan names paths outside the story's owned paths, planning once more: "
        "2. Register contoOverviewFeature in App.tsx (src/App.tsx); 3. Helper (src/other/util.ts)"
    )


def titles(settled: Settled) -> list[str]:
    return [t.title for t in settled.plan.tasks]


@pytest.mark.parametrize(
    ("case", "second", "kept", "dropped", "all_foreign"),
    [
        ("a clean second plan is kept", tasks(OWN), ["Overview"], [], False),
        ("a foreign stray is dropped", tasks(OWN, REGISTER), ["Overview"], [REGISTER[0]], False),
        ("a stray no story owns stays", tasks(OWN, NOBODY), ["Overview", "Helper"], [], False),
        ("both at once", tasks(REGISTER, NOBODY, OWN), ["Helper", "Overview"], [REGISTER[0]], False),
        ("every task foreign: kept as it is", tasks(REGISTER), [REGISTER[0]], [], True),
        (
            "every task foreign, several: kept as it is",
            tasks(REGISTER, ("Docs", "Write docs/conto.md")),
            [REGISTER[0], "Docs"],
            [],
            True,
        ),
        ("an empty second plan stays empty", tasks(), [], [], False),
    ],
)
def test_the_second_plan_drops_only_the_foreign_strays(
    case: str, second: TaskPlan, kept: list[str], dropped: list[str], all_foreign: bool
) -> None:
    settled = after_replan(PLAN, "app", second)
    assert titles(settled) == kept, case
    assert [s.title for s in settled.dropped] == dropped, case
    assert settled.all_foreign is all_foreign, case
    if not dropped:
        assert settled.plan == second, case  # nothing dropped: the plan exactly as planned


def test_the_settled_info_says_what_was_dropped_and_what_was_kept() -> None:
    settled = after_replan(PLAN, "app", tasks(REGISTER, NOBODY, OWN))
    assert settled.message == (
        "second task plan: dropped 1 task naming another story's paths: "
        "1. Register contoOverviewFeature in App.tsx (src/App.tsx); "
        "kept 1 task naming paths no story owns: 2. Helper (src/other/util.ts)"
    )
    assert after_replan(PLAN, "app", tasks(OWN)).message == (
        "second task plan: every task stays inside the story's paths"
    )
    assert after_replan(PLAN, "app", tasks(REGISTER)).message.startswith(
        "every task of the second plan names another story's paths, so it is kept as it is"
    )


@pytest.mark.parametrize(
    ("case", "descriptions", "waits"),
    [
        # Task 2 (index 2) is the foreign one in every row; `waits` is each kept task's Depends on.
        ("no lines: every earlier task", ["a", "b", "c"], [[], [1]]),
        (
            "waiting on the dropped task: on what it waited for",
            ["a", "b\nDepends on: 1", "c\nDepends on: 2"],
            [[], [1]],
        ),
        ("a dropped task waiting on nothing", ["a", "b\nDepends on: none", "c\nDepends on: 1, 2"], [[], [1]]),
        ("`none` stays none", ["a", "b", "c\nDepends on: none"], [[], []]),
        ("later numbers shift down", ["a", "b", "c\nDepends on: 1", "d\nDepends on: 3"], [[], [1], [2]]),
        (
            "the dropped task's own waits, transitively",
            ["a", "b\nDepends on: 1", "c\nDepends on: none", "d\nDepends on: 2, 3"],
            [[], [], [1, 2]],
        ),
    ],
)
def test_dropping_renumbers_the_depends_on_lines(
    case: str, descriptions: list[str], waits: list[list[int]]
) -> None:
    items = [(f"t{i}", d) for i, d in enumerate(descriptions, start=1)]
    items[1] = (f"{REGISTER[0]} {items[1][0]}", items[1][1])  # task 2 names the shell's App.tsx
    settled = after_replan(PLAN, "app", tasks(*items))
    assert [t.title for t in settled.dropped] == [items[1][0]], case
    got = [depends_on(t.description, i) for i, t in enumerate(settled.plan.tasks, start=1)]
    assert got == waits, case


def test_strays_are_numbered_as_in_the_second_plan() -> None:
    settled = after_replan(PLAN, "app", tasks(REGISTER, OWN, NOBODY))
    assert [(s.index, s.title) for s in settled.dropped] == [(1, REGISTER[0])]
    assert [(s.index, s.title) for s in settled.kept] == [(3, "Helper")]


@pytest.mark.parametrize(
    ("description", "index", "deps", "expected"),
    [
        ("Do x.\nDepends on: 1, 3\nOwns: a", 4, [1, 2], "Do x.\nDepends on: 1, 2\nOwns: a"),
        ("Do x. Depends on: 3 Owns: src/a.py", 4, [], "Do x. Depends on: none Owns: src/a.py"),
        ("Do x. Depends on: tasks 1 and 3. More", 4, [2], "Do x. Depends on: 2. More"),
        ("Do x. Depends on: none", 4, [2], "Do x. Depends on: none"),  # none stays none
        ("Do x.", 4, [2], "Do x."),  # no line: every earlier task, as before
        ("Do x. Depends on: 7", 4, [2], "Do x. Depends on: 7"),  # names no valid task: the default
    ],
)
def test_with_depends_on_rewrites_only_an_explicit_list(
    description: str, index: int, deps: list[int], expected: str
) -> None:
    assert with_depends_on(description, index, deps) == expected
