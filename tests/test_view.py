from __future__ import annotations

from flowd.control.shapes import cost_wire, lane_wire, run_wire
from flowd.events.model import (
    Envelope,
    Event,
    ExecutorLeased,
    ExecutorReleased,
    PlannedTask,
    RunEnded,
    RunStarted,
    StoryAnswered,
    StoryPaused,
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


def _answered_budget(*answers: StoryAnswered) -> tuple[float, float | None]:
    view = fold(
        "r",
        envelopes(
            RunStarted(
                epic_id="e", epic_branch="epic/e", plan="p", stories=["a"], concurrency=1, budget_usd=1.0
            ),
            *(
                event
                for answer in answers
                for event in (StoryPaused(reason="budget", question="raise?", options=["stop"]), answer)
            ),
        ),
    )
    return view.raised_usd, view.budget_usd


def test_the_fold_takes_an_answers_recorded_effect_and_never_reads_its_text() -> None:
    # The recorded effect wins over any reading of the text: the fold never decides again.
    recorded = StoryAnswered(answer="raise 2", by="cli", effect="raise", raise_usd=3.0)
    assert _answered_budget(recorded) == (3.0, 4.0)
    stopped = StoryAnswered(answer="raise 2", by="cli", effect="stop")
    assert _answered_budget(stopped) == (0.0, 1.0)


def test_an_answer_from_before_effects_were_recorded_folds_as_the_runner_read_it() -> None:
    old = [StoryAnswered(answer=text, by="cli") for text in ("raise $2.5", "RAISE 1", "stop", "raise -1")]
    assert _answered_budget(*old) == (3.5, 4.5)
    assert StoryAnswered(answer="raise 5", by="cli").added_usd("blocked") is None  # told, not raised


def test_the_fold_loads_no_pause_rule() -> None:
    """The view checkpoint hashes the fold's code (docs/trace.md): the pause rules are not part of it."""
    import subprocess
    import sys

    script = "import sys, flowd.trace.checkpoint, flowd.trace.fastfold; print('flowd.engine.core.pause' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
