"""Perimeter-aware planning: a task plan naming paths outside its story is planned once more, and
the tasks of the second plan that still name another story's paths are dropped
(docs/plan-format.md "Stray tasks").

A *stray* task is an incomplete task whose title or description names a path outside the story's
owned and shared read-only paths (`flowd.plan.perimeter.stray_tasks`: naming a folder that holds an
owned path is a location, not a target). It is *foreign* when one of those paths is another
story's. The shell asks the planner, gets a plan, and hands it here:

1. `after_plan` on the first plan: `Keep` it, or `Replan` naming the strays (an `Info`, and one
   more planner turn whose prompt lists them, `prompts.replan_prompt`).
2. `after_replan` on the second plan: `Settled` with the foreign strays dropped, the others kept
   for the perimeter gate to watch; when dropping would leave no task, the second plan as it is.

Only a freshly planned story gets here: a resumed story's checkpoint is the plan it already
approved, and is never planned again.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowd.plan.model import StoryPlan
from flowd.plan.perimeter import StrayTask, stray_tasks
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import depends_on, with_depends_on


@dataclass(frozen=True)
class Keep:
    """The plan names no path outside the story: run it as it is."""

    plan: TaskPlan


@dataclass(frozen=True)
class Replan:
    """Plan once more, telling the planner which tasks strayed."""

    strays: tuple[StrayTask, ...]

    @property
    def message(self) -> str:
        return (
            f"the task plan names paths outside the story's owned paths, planning once more: "
            f"{describe(self.strays)}"
        )


@dataclass(frozen=True)
class Settled:
    """The plan to run after the second planner turn, and what became of its strays (numbered as
    in the second plan, as the `Info` names them)."""

    plan: TaskPlan
    dropped: tuple[StrayTask, ...]  # foreign strays taken out of the plan
    kept: tuple[StrayTask, ...]  # strays left in it, for the perimeter gate
    all_foreign: bool  # every task was a foreign stray: the plan was kept as it is

    @property
    def message(self) -> str:
        if self.all_foreign:
            return (
                "every task of the second plan names another story's paths, so it is kept as it is "
                f"(the perimeter gate watches them): {describe(self.kept)}"
            )
        parts = []
        if self.dropped:
            parts.append(
                f"dropped {_count(self.dropped)} naming another story's paths: {describe(self.dropped)}"
            )
        if self.kept:
            parts.append(f"kept {_count(self.kept)} naming paths no story owns: {describe(self.kept)}")
        return "second task plan: " + ("; ".join(parts) or "every task stays inside the story's paths")


def after_plan(plan: StoryPlan, story_id: str, tasks: TaskPlan) -> Keep | Replan:
    """The first plan of story `story_id`: keep it, or plan again because some task strays."""
    strays = stray_tasks(plan, story_id, tasks)
    return Replan(tuple(strays)) if strays else Keep(tasks)


def after_replan(plan: StoryPlan, story_id: str, tasks: TaskPlan) -> Settled:
    """The second plan of story `story_id`, with the tasks naming another story's paths dropped.

    The `Depends on:` numbers of the tasks kept are renumbered; a task that waited for a dropped
    one waits for what that one waited for."""
    strays = stray_tasks(plan, story_id, tasks)
    foreign = tuple(s for s in strays if s.foreign)
    others = tuple(s for s in strays if not s.foreign)
    if foreign and len(foreign) == len(tasks.tasks):
        return Settled(tasks, dropped=(), kept=tuple(strays), all_foreign=True)
    if not foreign:
        return Settled(tasks, dropped=(), kept=others, all_foreign=False)
    return Settled(
        _without(tasks, {s.index for s in foreign}), dropped=foreign, kept=others, all_foreign=False
    )


def _without(tasks: TaskPlan, dropped: set[int]) -> TaskPlan:
    """`tasks` without the tasks numbered `dropped`, their `Depends on:` lines renumbered."""
    waits: dict[int, list[int]] = {}  # old index -> the kept old indexes it waits for
    new_index: dict[int, int] = {}
    kept: list[Task] = []
    for index, task in enumerate(tasks.tasks, start=1):
        found: list[int] = []
        for dep in depends_on(task.description, index):
            for old in waits[dep] if dep in dropped else [dep]:
                if old not in found:
                    found.append(old)
        waits[index] = found
        if index in dropped:
            continue
        new_index[index] = len(kept) + 1
        deps = sorted(new_index[old] for old in found)
        kept.append(task.model_copy(update={"description": with_depends_on(task.description, index, deps)}))
    return tasks.model_copy(update={"tasks": kept})


def _count(strays: tuple[StrayTask, ...]) -> str:
    return f"{len(strays)} task" + ("" if len(strays) == 1 else "s")


def describe(strays: tuple[StrayTask, ...]) -> str:
    """`2. <title> (<path>, …)` for each stray task, `; `-separated."""
    return "; ".join(f"{s.index}. {s.title} ({', '.join(s.paths)})" for s in strays)
