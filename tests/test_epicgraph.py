"""The epic graph and timeline from the fold (flowd/engine/epicgraph.py, docs/graph.md): tables of
traces in, nodes, the critical path and each lane's phases out."""

from __future__ import annotations

import pytest

from flowd.control.shapes import lane_wire
from flowd.engine.epicgraph import critical_stories, graph_wire, timeline_wire
from flowd.events.model import (
    Envelope,
    Event,
    GateResult,
    MergeBatchResult,
    MergeBatchStarted,
    MergeBisect,
    MergeRevision,
    MergeRolledBack,
    PlannedTask,
    RunStarted,
    StageStarted,
    StoryAnswered,
    StoryMerged,
    StoryPaused,
    StoryStatusChanged,
    TaskCompleted,
    TasksPlanned,
    TaskStarted,
    WorktreePrepared,
)
from flowd.plan.graph import critical_path, rank_of_graph
from flowd.trace.view import RunView, fold

RUN = "r1"
DIAMOND = {"core": [], "parser": ["core"], "format": ["core"], "cli": ["parser", "format"], "docs": []}


def at(second: int) -> str:
    return f"2026-12-01T10:{second // 60:02d}:{second % 60:02d}.000Z"


def folded(timed: list[tuple[int, Event]]) -> RunView:
    return fold(RUN, [Envelope(seq=n, at=at(s), run_id=RUN, event=e) for n, (s, e) in enumerate(timed, 1)])


def started(depends: dict[str, list[str]] = DIAMOND) -> RunStarted:
    return RunStarted(
        epic_id="e", epic_branch="epic/e", plan="p.json", stories=list(depends), concurrency=2,
        titles={s: s.title() for s in depends}, depends_on=depends,
    )  # fmt: skip


def merged(story: str, start: int, end: int) -> list[tuple[int, Event]]:
    """A story's whole life: active, one task with one gate, its merge behind the epic gates, done."""
    return [
        (start, StoryStatusChanged(story=story, status="active")),
        (start, TasksPlanned(lane=story, tasks=[PlannedTask(title="t")])),
        (start + 1, TaskStarted(lane=story, index=1, count=1, title="t")),
        (end - 3, GateResult(lane=story, where="task", gate="g", ok=True, exit_code=0, duration_ms=1000)),
        (end - 3, TaskCompleted(lane=story, index=1, count=1, title="t")),
        (end - 2, StageStarted(stage=f"story {story}: merge", lane=story)),
        (end, GateResult(lane=story, where="epic", gate="g", ok=True, exit_code=0, duration_ms=1000)),
        (end, StoryMerged(lane=story, branch=f"story/e/{story}", commit="c" * 40)),
        (end, StoryStatusChanged(story=story, status="done")),
    ]


@pytest.mark.parametrize(
    ("depends", "weights", "path"),
    [
        (DIAMOND, None, ["core", "parser", "cli"]),  # equal ranks: plan order
        (DIAMOND, {"format": 5.0}, ["core", "format", "cli"]),  # the heavier branch
        (DIAMOND, {"docs": 10.0}, ["docs"]),  # a lone long story outweighs the chain
        ({"a": [], "b": ["a"], "c": ["b"]}, None, ["a", "b", "c"]),
        ({"a": ["b"], "b": ["a"]}, None, []),  # a cycle (invalid plan): no root, no path
        ({}, None, []),
    ],
)
def test_the_critical_path_follows_the_plan_graphs_rank(
    depends: dict[str, list[str]], weights: dict[str, float] | None, path: list[str]
) -> None:
    assert critical_path(depends, rank_of_graph(depends, weights)) == path


def test_the_critical_path_weighs_finished_stories_by_the_time_they_took() -> None:
    # format took 50 s, parser 5 s: the chain through format is the long one.
    view = folded(
        [(0, started()), *merged("core", 0, 10), *merged("parser", 10, 15), *merged("format", 10, 60)]
    )
    assert critical_stories(view) == ["core", "format", "cli"]


def test_nodes_carry_status_edges_times_and_the_critical_mark() -> None:
    view = folded(
        [(0, started()), *merged("core", 0, 10), (11, StoryStatusChanged(story="parser", status="active"))]
    )
    stories = {s["id"]: s for s in graph_wire(view)["stories"]}
    assert list(stories) == ["core", "parser", "format", "cli", "docs"]
    assert stories["core"] == {
        "id": "core", "title": "Core", "status": "done", "dependsOn": [], "lane": "core",
        "startedAt": at(0), "endedAt": at(10), "mergedAt": at(10), "critical": True,
    }  # fmt: skip
    assert stories["parser"] == {
        "id": "parser", "title": "Parser", "status": "active", "dependsOn": ["core"], "lane": "parser",
        "startedAt": at(11), "critical": True,
    }  # fmt: skip
    assert stories["cli"]["dependsOn"] == ["parser", "format"] and "lane" not in stories["cli"]
    assert [s for s, v in stories.items() if v["critical"]] == ["core", "parser", "cli"]
    assert graph_wire(view)["batches"] == []


def test_a_trace_without_dependencies_draws_nodes_without_edges() -> None:
    old = RunStarted(epic_id="e", epic_branch="epic/e", plan="p", stories=["a", "b"], concurrency=1)
    stories = graph_wire(folded([(0, old)]))["stories"]
    assert [(s["id"], s["dependsOn"], s["status"]) for s in stories] == [
        ("a", [], "planned"),
        ("b", [], "planned"),
    ]


def phases(view: RunView, lane: str) -> list[tuple[str, str, str | None]]:
    wire = {w["lane"]: w for w in timeline_wire(view)["lanes"]}[lane]
    return [(p["phase"], p["start"], p.get("end")) for p in wire["phases"]]


def test_a_merged_story_goes_planned_coding_gated_queued_merging_merged() -> None:
    view = folded([(0, started()), *merged("core", 5, 20)])
    assert phases(view, "core") == [
        ("planned", at(0), at(5)),
        ("coding", at(5), at(16)),
        ("gated", at(16), at(17)),  # the gate's own duration, ending when its result came
        ("coding", at(17), at(18)),  # its judge
        ("queued", at(18), at(19)),  # its merge stage, waiting for the epic gates
        ("merging", at(19), at(20)),  # the epic gates' own run
        ("merged", at(20), at(20)),
    ]
    assert phases(view, "docs") == [("planned", at(0), None)]


def test_the_merge_trains_batches_are_on_the_graph_and_the_timeline() -> None:
    view = folded([
        (0, started()),
        (1, StoryStatusChanged(story="core", status="active")),
        (1, StoryStatusChanged(story="docs", status="active")),
        (3, StageStarted(stage="story core: merge", lane="core")),
        (4, StageStarted(stage="story docs: merge", lane="docs")),
        (5, MergeBatchStarted(batch=1, lanes=["core", "docs"], base="b" * 40)),
        (7, MergeBatchResult(batch=1, ok=False, duration_ms=2000)),
        (7, MergeBisect(batch=1, lanes=["docs"], culprit="docs")),
        (7, MergeRolledBack(lane="docs", reason="red alone")),
        (8, MergeBatchStarted(batch=2, lanes=["core"], base="b" * 40)),
        (9, MergeBatchResult(batch=2, ok=True, duration_ms=1000)),
        (9, StoryMerged(lane="core", branch="story/e/core", commit="c" * 40)),
    ])  # fmt: skip
    assert graph_wire(view)["batches"] == [
        {"batch": 1, "lanes": ["core", "docs"], "ok": False},
        {"batch": 2, "lanes": ["core"], "ok": True},
    ]
    assert [p[0] for p in phases(view, "core")] == ["planned", "coding", "queued", "merging", "merged"]
    assert phases(view, "docs")[-3:] == [
        ("queued", at(4), at(5)),
        ("merging", at(5), at(7)),
        ("coding", at(7), None),
    ]


def test_pauses_red_merges_and_failures_on_the_timeline() -> None:
    view = folded([
        (0, started()),
        (1, StoryStatusChanged(story="core", status="active")),
        (2, StoryPaused(lane="core", reason="budget", question="raise?", options=["raise 1"])),
        (4, StoryAnswered(lane="core", answer="raise 1", by="cli")),
        (6, StageStarted(stage="story core: merge", lane="core")),
        (7, GateResult(lane="core", where="epic", gate="g", ok=False, exit_code=1, duration_ms=1000)),
        (8, MergeRevision(lane="core", round=1, gate="pytest", output="red")),
        (9, StoryStatusChanged(story="core", status="failed", reason="gave up")),
        (9, StoryStatusChanged(story="parser", status="skipped")),
    ])  # fmt: skip
    assert phases(view, "core") == [
        ("planned", at(0), at(1)),
        ("coding", at(1), at(2)),
        ("paused", at(2), at(4)),
        ("coding", at(4), at(6)),
        ("merging", at(6), at(8)),  # queued for no time: the epic gate ran from the stage's start
        ("coding", at(8), at(9)),
        ("failed", at(9), at(9)),
    ]
    assert phases(view, "parser") == [("planned", at(0), at(9))]
    assert timeline_wire(view)["startedAt"] == at(0)


def test_the_lane_carries_its_ports() -> None:
    view = folded(
        [(0, started()), (1, WorktreePrepared(lane="core", copied=[], port=41000, ports="41000-41009"))]
    )
    wire = lane_wire(view, view.lanes["core"])
    assert (wire["port"], wire["ports"]) == (41000, "41000-41009")
