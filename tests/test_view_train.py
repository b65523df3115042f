"""The fold's share of the merge train (docs/merging.md): lanes `queued`, `merging` with their batch,
back to `active` when a merge is undone; batches with their verdicts and bisections."""

from __future__ import annotations

from flowd.control.shapes import lane_wire
from flowd.events.model import (
    Envelope,
    Event,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRolledBack,
    RunStarted,
    StageStarted,
    StoryMerged,
    StoryStatusChanged,
)
from flowd.trace.view import BatchView, fold


def envelopes(*events: Event) -> list[Envelope]:
    return [
        Envelope(seq=n, at=f"2026-11-29T10:00:{n:02d}.000Z", run_id="r", event=e)
        for n, e in enumerate(events, 1)
    ]


START = RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b", "c"], concurrency=3)


def test_a_lane_is_queued_then_merging_with_its_batch_then_done() -> None:
    events: list[Event] = [
        START,
        *(StoryStatusChanged(story=s, status="active") for s in "abc"),
        StageStarted(stage="story a: merge", lane="a"),
        StageStarted(stage="story b: merge", lane="b"),
        StageStarted(stage="story c: setup", lane="c"),
    ]
    view = fold("r", envelopes(*events))
    assert [view.lanes[s].status for s in "abc"] == ["queued", "queued", "active"]
    events.append(MergeBatchStarted(batch=1, lanes=["a", "b"], base="f" * 40))
    view = fold("r", envelopes(*events))
    assert [(view.lanes[s].status, view.lanes[s].batch) for s in "ab"] == [("merging", 1), ("merging", 1)]
    assert lane_wire(view, view.lanes["a"])["batch"] == 1 and "batch" not in lane_wire(view, view.lanes["c"])
    events += [
        MergeBatchResult(batch=1, ok=True, duration_ms=2000),
        StoryMerged(lane="a", branch="story/e/a", commit="1" * 40),
        StoryStatusChanged(story="a", status="done"),
    ]
    view = fold("r", envelopes(*events))
    assert (view.lanes["a"].status, view.lanes["a"].batch) == ("done", None)
    assert view.batches == [BatchView(1, ["a", "b"], "f" * 40, ok=True, duration_ms=2000)]


def test_a_bisected_batch_counts_its_runs_and_sends_the_culprit_back() -> None:
    events: list[Event] = [
        START,
        *(StoryStatusChanged(story=s, status="active") for s in "abc"),
        *(StageStarted(stage=f"story {s}: merge", lane=s) for s in "abc"),
        MergeBatchStarted(batch=1, lanes=["a", "b", "c"], base="f" * 40),
        MergeBatchResult(batch=1, ok=False, duration_ms=4000),
        MergeBisect(batch=1, lanes=["a"]),
        MergeBisect(batch=1, lanes=["b", "c"]),
        MergeBisect(batch=1, lanes=["c"], culprit="c"),
        MergeRolledBack(lane="c", reason="red"),
    ]
    view = fold("r", envelopes(*events))
    assert (view.lanes["c"].status, view.lanes["c"].batch) == ("active", None)
    assert view.lanes["a"].status == "merging"
    assert view.batches[0].ok is False and view.batches[0].bisections == 3
    assert view.batches[0].culprits == ["c"]
    # A lane's own stage names only it: another lane's merge stage does not queue it.
    assert (
        fold("r", envelopes(START, StageStarted(stage="story a: merge", lane="b"))).lanes["b"].status
        == "planned"
    )


def test_a_one_story_batch_red_names_its_culprit_and_the_report_lists_the_train() -> None:
    from flowd.engine.report import build_report, render_markdown
    from flowd.plan.model import Story, StoryPlan

    events: list[Event] = [
        START,
        *(StoryStatusChanged(story=s, status="active") for s in "abc"),
        MergeBatchStarted(batch=1, lanes=["a", "b"], base="f" * 40),
        MergeBatchResult(batch=1, ok=True, duration_ms=2000),
        *(StoryStatusChanged(story=s, status="done") for s in "ab"),
        MergeBatchStarted(batch=2, lanes=["c"], base="e" * 40),
        MergeBatchResult(batch=2, ok=False, duration_ms=4000),
        MergeRolledBack(lane="c", reason="red"),
    ]
    view = fold("r", envelopes(*events))
    assert view.batches[1].culprits == ["c"] and view.lanes["c"].status == "active"
    plan = StoryPlan(epic_id="e", stories=[Story(id=s, title=s, owned=[f"{s}/"]) for s in "abc"])
    report = build_report(plan, view, {})
    train = report.merge_train
    assert train is not None and [b.batch for b in train.batches] == [1, 2]
    # One at a time: a, b and c's attempt, each a 2-s run; the train took 2 + 4 s.
    assert (train.one_at_a_time_ms, train.gate_ms, train.saved_ms) == (6000, 6000, 0)
    markdown = render_markdown(report)
    assert "## Merge train" in markdown and "- batch 2: c — red in 4.0 s; culprit c" in markdown
