from __future__ import annotations

from flowd.server.shapes import cost_wire, lane_wire, run_wire
from flowd.trace.events import (
    Envelope,
    Event,
    ExecutorLeased,
    ExecutorReleased,
    PlannedTask,
    RunEnded,
    RunStarted,
    StoryStatusChanged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
    TokensUsed,
    Usage,
)
from flowd.trace.view import fold


def envelopes(*events: Event) -> list[Envelope]:
    return [
        Envelope(seq=n, at=f"2026-11-29T10:00:{n:02d}.000Z", run_id="r", event=e)
        for n, e in enumerate(events, 1)
    ]


def test_fold_builds_lanes_tasks_clones_and_totals() -> None:
    view = fold(
        "r",
        envelopes(
            RunStarted(
                epic_id="e",
                epic_branch="epic/e",
                plan="p.json",
                stories=["api", "ui"],
                concurrency=2,
                titles={"api": "Login API"},
                budget_usd=5.0,
            ),
            StoryStatusChanged(story="api", status="active"),
            ExecutorLeased(executor="demo", clone=1, role="coder", label="api"),
            TasksPlanned(lane="api", tasks=[PlannedTask(title="one"), PlannedTask(title="two")]),
            TaskStarted(lane="api", index=1, count=2, title="one", executor="demo", clone=1),
            TokensUsed(
                lane="api",
                executor="demo",
                clone=1,
                agent="coder",
                model="m",
                usage=Usage(input=100, output=20, total=120, cost_usd=0.5),
            ),
            TokensUsed(
                lane="api", agent="reviewer", usage=Usage(input=10, output=5, total=15), estimated=True
            ),
            TaskCompleted(lane="api", index=1, count=2, title="one"),
            TaskStarted(lane="api", index=2, count=2, title="two"),
        ),
    )
    api = view.lanes["api"]
    assert api.title == "Login API" and api.status == "active"
    assert (api.executor, api.clone) == ("demo", 1)
    assert [t.state for t in api.tasks] == ["completed", "started"]
    assert lane_wire(view, api) == {
        "runId": "r", "lane": "api", "title": "Login API", "status": "active", "executor": "demo", "clone": 1,
        "task": {"index": 2, "count": 2, "title": "two"}, "tokens": 135, "costUsd": 0.5, "estimated": True,
    }  # fmt: skip
    assert cost_wire(view) == {
        "runId": "r", "tokens": 135, "costUsd": 0.5, "estimatedTokens": 15, "unpricedTokens": 15, "budgetUsd": 5.0,
    }  # fmt: skip
    assert run_wire(view) == {
        "runId": "r",
        "epicId": "e",
        "status": "running",
        "done": 0,
        "failed": 0,
        "skipped": 0,
        "total": 2,
    }
    assert [c.name for c in view.clones.values() if c.held] == ["demo#1"]


def test_fold_ends_runs_and_releases_clones() -> None:
    view = fold(
        "r",
        envelopes(
            RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a"], concurrency=1),
            ExecutorLeased(executor="x", clone=2, role="coder", label="a"),
            ExecutorReleased(executor="x", clone=2, role="coder", label="a"),
            StoryStatusChanged(story="a", status="done"),
            RunEnded(outcome="done", done=1, failed=0, skipped=0),
        ),
    )
    assert view.status == "done" and view.lanes["a"].executor is None
    assert not any(c.held for c in view.clones.values())
    assert run_wire(view)["done"] == 1


def test_fold_prices_with_the_given_pricer_and_never_counts_unknown_as_zero() -> None:
    events = envelopes(
        TokensUsed(lane="a", agent="coder", model="known", usage=Usage(input=1000, output=0, total=1000)),
        TokensUsed(lane="a", agent="coder", model="mystery", usage=Usage(input=10, output=0, total=10)),
    )
    view = fold("r", events, pricer=lambda model, usage: 0.001 * usage.input if model == "known" else None)
    assert view.totals.cost_usd == 1.0 and view.totals.unpriced_tokens == 10


def test_replayed_lines_are_not_folded_twice() -> None:
    events = envelopes(TokensUsed(agent="coder", usage=Usage(input=1, output=1, total=2)))
    view = fold("r", events + events)
    assert view.totals.tokens == 2
