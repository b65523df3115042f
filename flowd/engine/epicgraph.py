"""The epic graph and timeline (docs/graph.md), computed from the one fold of the trace.

Pure: a `RunView` in, the protocol's `flow/graph` and `flow/timeline` shapes out. The editors,
the report's Mermaid blocks and its HTML page all draw from these two functions, so a node's
status here is the one `flow/lane` sends. The critical path is the plan graph's own
(`flowd.plan.graph.critical_path_rank`), weighted by how long the finished stories took.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from flowd.base.timeutil import parse_iso
from flowd.plan.graph import critical_path, rank_of_graph
from flowd.protocol import models as proto
from flowd.trace.view import LaneView, RunView


def dependencies(view: RunView) -> dict[str, list[str]]:
    """Each story of the run (plan order) → its dependencies among the run's stories."""
    return {s: [d for d in view.depends.get(s, []) if d in view.lanes and d != s] for s in view.lanes}


def seconds(start: str | None, end: str | None) -> float | None:
    if start is None or end is None:
        return None
    try:
        return max(0.0, (parse_iso(end) - parse_iso(start)).total_seconds())
    except ValueError:
        return None


def weights(view: RunView) -> dict[str, float]:
    """A finished story weighs what it took (first active to its end); any other the median of
    those, or 1 when none has finished (the ranking needs only ratios)."""
    took = {
        s: t
        for s, lane in view.lanes.items()
        if (t := seconds(lane.started_at, lane.merged_at or lane.ended_at)) is not None
    }
    rest = median(took.values()) if took else 1.0
    return {s: took.get(s, rest) or rest or 1.0 for s in view.lanes}


def critical_stories(view: RunView) -> list[str]:
    depends = dependencies(view)
    return critical_path(depends, rank_of_graph(depends, weights(view)))


def _has_lane(lane: LaneView) -> bool:
    return lane.started_at is not None or lane.status != "planned"


def graph(view: RunView) -> proto.GraphResult:
    depends = dependencies(view)
    critical = set(critical_stories(view))
    stories = [
        proto.GraphStory(
            id=story,
            title=lane.title,
            status=lane.status,
            depends_on=depends[story],
            lane=lane.lane if _has_lane(lane) else None,
            started_at=lane.started_at,
            ended_at=lane.ended_at,
            merged_at=lane.merged_at,
            critical=story in critical,
        )
        for story, lane in view.lanes.items()
    ]
    batches = [proto.GraphBatch(batch=b.batch, lanes=list(b.lanes), ok=b.ok) for b in view.batches]
    return proto.GraphResult(stories=stories, batches=batches)


def graph_wire(view: RunView) -> dict[str, Any]:
    return graph(view).wire()


def timeline(view: RunView) -> proto.TimelineResult:
    lanes = [
        proto.TimelineLane(
            lane=lane.lane,
            title=lane.title,
            status=lane.status,
            phases=[proto.TimelinePhase(phase=p.phase, start=p.start, end=p.end) for p in lane.phases],
        )
        for lane in view.lanes.values()
    ]
    return proto.TimelineResult(started_at=view.started_at, ended_at=view.ended_at, lanes=lanes)


def timeline_wire(view: RunView) -> dict[str, Any]:
    return timeline(view).wire()
