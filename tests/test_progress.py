from __future__ import annotations

from rich.console import Console

from flowd.control.progress import render_run
from flowd.events.model import (
    Envelope,
    Event,
    ExecutorExcluded,
    ExecutorLeased,
    RunStarted,
    StoryStatusChanged,
    TaskStarted,
    TokensUsed,
    Usage,
)
from flowd.trace.view import fold


def text_of(*events: Event) -> str:
    envelopes = [
        Envelope(seq=n, at="2026-11-29T10:00:00.000Z", run_id="r", event=e) for n, e in enumerate(events, 1)
    ]
    console = Console(width=120, record=True, color_system=None)
    console.print(render_run(fold("r", envelopes)))
    return console.export_text()


def test_lanes_clones_exclusions_and_totals_are_shown() -> None:
    out = text_of(
        RunStarted(
            epic_id="auth",
            epic_branch="epic/auth",
            plan="p",
            stories=["api", "ui"],
            concurrency=2,
            budget_usd=5.0,
        ),
        StoryStatusChanged(story="api", status="active"),
        ExecutorLeased(executor="claude", clone=2, role="coder", label="api"),
        TaskStarted(lane="api", index=1, count=3, title="Write the handler"),
        TokensUsed(
            lane="api",
            executor="claude",
            clone=2,
            agent="coder",
            usage=Usage(input=1000, output=200, total=1200, cost_usd=0.25),
        ),
        ExecutorExcluded(executor="codex", reason="usage limit reached", until="2026-11-29T11:00:00.000Z"),
    )
    assert "Epic auth [running] 0/2 stories · 1 lane · 1,200 tokens · $0.25 of $5.00" in out
    assert "api" in out and "claude#2" in out and "1/3 Write the handler" in out
    assert "clones held: claude#2 coder (api)" in out
    assert "codex excluded until 2026-11-29T11:00:00.000Z: usage limit reached" in out


def test_a_narrow_terminal_shortens_the_task_not_the_ids_or_statuses() -> None:
    envelopes = [
        Envelope(seq=n, at="2026-11-29T10:00:00.000Z", run_id="r", event=e)
        for n, e in enumerate(
            [
                RunStarted(
                    epic_id="e", epic_branch="epic/e", plan="p", stories=["payments-api"], concurrency=1
                ),
                StoryStatusChanged(story="payments-api", status="failed", reason="x" * 200),
            ],
            1,
        )
    ]
    console = Console(width=60, record=True, color_system=None)
    console.print(render_run(fold("r", envelopes)))
    row = next(line for line in console.export_text().splitlines() if line.startswith("payments-api"))
    assert row.split()[:2] == ["payments-api", "failed"]
    assert "xxx…" in row and len(row) <= 60


def test_the_merge_train_is_shown_live_and_as_plain_lines() -> None:
    from flowd.control.progress import plain_lines
    from flowd.events.model import MergeBatchResult, MergeBatchStarted, MergeBisect, StageStarted
    from flowd.trace.view import RunView

    events: list[Event] = [
        RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b", "c"], concurrency=3),
        *(StoryStatusChanged(story=s, status="active") for s in "abc"),
        *(StageStarted(stage=f"story {s}: merge", lane=s) for s in "abc"),
        MergeBatchStarted(batch=4, lanes=["a", "b"], base="0123456789abcdef"),
    ]
    out = text_of(*events)
    assert "merging #4" in out and "queued" in out
    assert "merge train — batch 4: a, b; queued: c" in out
    view = RunView(run_id="r")
    lines: list[str] = []
    more: list[Event] = [
        MergeBatchResult(batch=4, ok=False, duration_ms=2500),
        MergeBisect(batch=4, lanes=["a"]),
        MergeBisect(batch=4, lanes=["b"], culprit="b"),
    ]
    for n, event in enumerate([*events, *more], 1):
        envelope = Envelope(seq=n, at="2026-11-29T10:00:00.000Z", run_id="r", event=event)
        view.apply(envelope)
        lines += [line.split(" ", 1)[1] for line in plain_lines(view, envelope)]
    assert "merge train: batch 4 gating a, b on 0123456789" in lines
    assert "merge train: batch 4 red in 2.5s" in lines
    assert "merge train: batch 4 bisecting: gating a" in lines
    assert "merge train: batch 4 bisected: b is red alone" in lines


def test_a_lanes_ports_are_shown_in_status_and_plain_status() -> None:
    from flowd.control.progress import plain_run
    from flowd.events.model import WorktreePrepared

    started = RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b"], concurrency=2)
    ports = WorktreePrepared(lane="a", copied=[], port=41000, ports="41000-41009")
    out = text_of(started, ports)
    row = next(line for line in out.splitlines() if line.startswith("a "))
    assert "41000-41009" in row and "ports" in out
    view = fold("r", [Envelope(seq=n, at="2026-11-29T10:00:00.000Z", run_id="r", event=e) for n, e in
                      enumerate([started, ports], 1)])  # fmt: skip
    lines = plain_run(view)
    assert lines[1].split() == ["lane", "status", "clone", "ports", "task", "tokens", "cost"]
    assert lines[2].split() == ["a", "planned", "41000-41009"] and lines[3].split() == ["b", "planned"]


def test_a_perimeter_event_flagged_twice_in_a_row_prints_once() -> None:
    from flowd.control.progress import PlainProgress
    from flowd.events.model import Info, PerimeterPath, PerimeterViolation
    from flowd.trace.view import RunView

    def flagged(lane: str, path: str, action: str = "flagged") -> PerimeterViolation:
        return PerimeterViolation(lane=lane, paths=[PerimeterPath(path=path, kind="outside")], action=action)  # type: ignore[arg-type]

    events: list[Event] = [
        RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b"], concurrency=2),
        flagged("a", "x.txt"),
        flagged("a", "x.txt"),  # the watcher's next pass: the same, said once
        flagged("b", "x.txt"),  # another lane's own
        flagged("a", "x.txt"),  # still a's repeat: b's line is not a's
        flagged("a", "y.txt"),  # something new
        flagged("a", "y.txt", "restored"),  # what was done about it
        StoryStatusChanged(story="a", status="active"),
        flagged("a", "y.txt", "restored"),  # after another line of a: said again
        Info(message="run-wide"),
    ]
    view, progress, said = RunView(run_id="r"), PlainProgress(), []
    for n, event in enumerate(events, 1):
        envelope = Envelope(seq=n, at="2026-11-29T10:00:00.000Z", run_id="r", event=event)
        view.apply(envelope)
        said += [line.split(" ", 1)[1] for line in progress.lines(view, envelope)]
    assert [line for line in said if "perimeter" in line or ": active" in line] == [
        "a: perimeter violation, flagged: x.txt (outside)",
        "b: perimeter violation, flagged: x.txt (outside)",
        "a: perimeter violation, flagged: y.txt (outside)",
        "a: perimeter violation, restored: y.txt (outside)",
        "a: active",
        "a: perimeter violation, restored: y.txt (outside)",
    ]
