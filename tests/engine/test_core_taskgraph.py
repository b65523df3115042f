"""Which task runs next, home or aside (engine/core/taskgraph.py), step by step with no worktree."""

from __future__ import annotations

from flowd.engine.core.taskgraph import TaskGraphState
from flowd.tasks.model import Task, TaskPlan
from flowd.tasks.parsing import task_nodes


def graph(*descriptions: str, completed: tuple[int, ...] = ()) -> TaskGraphState:
    tasks = [
        Task(title=f"t{i}", description=d, completed=i in completed) for i, d in enumerate(descriptions, 1)
    ]
    return TaskGraphState.of(task_nodes(TaskPlan(story_id="s", tasks=tasks)))


def test_home_takes_the_first_ready_and_the_rest_may_run_aside() -> None:
    g = graph("Depends on: none", "Depends on: none", "Depends on: none", "Depends on: 1, 3")
    assert g.picks([], home_free=True) == (1, [2, 3])
    assert g.picks([1, 2], home_free=False) == (None, [3])
    g.declined(3)  # no coder free for it: it waits for home
    assert g.picks([1, 2], home_free=False) == (None, [])
    g.home_done(1)
    assert g.aside_done(2, "merged") is True
    assert g.picks([], home_free=True) == (3, [])  # task 4 waits for 3
    g.home_done(3)
    assert g.picks([], home_free=True) == (4, []) and not g.finished
    g.home_done(4)
    assert g.finished


def test_a_conflicted_task_goes_home_last_and_never_aside_again() -> None:
    g = graph("Depends on: none", "Depends on: none", "Depends on: none")
    assert g.picks([], home_free=True) == (1, [2, 3])
    assert g.aside_done(2, "conflict") is False
    assert g.aside_done(3, None) is False  # failed aside: home-only, not last
    g.home_done(1)
    assert g.picks([], home_free=True) == (3, [])  # 2 conflicted: after the other ready ones
    g.home_done(3)
    assert g.picks([], home_free=True) == (2, [])


def test_completed_tasks_are_done_from_the_start() -> None:
    g = graph("Depends on: none", "Depends on: 1", completed=(1,))
    assert g.picks([], home_free=True) == (2, [])
