"""A run view's protocol shapes (docs/protocol.md), built through the declared models.

The fold (`flowd/trace/view.py`) is pure run state; this module says how that state looks on the
wire: `flow/run`, `flow/lane`, `flow/task` and `flow/cost` params, and a `flow/status` run (also
what `flowd status --json` prints). Every shape goes through its model in
`flowd.protocol.models`, so a misspelt or missing field fails here rather than at the editor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowd.protocol import models as proto

if TYPE_CHECKING:
    from flowd.trace.view import LaneView, RunView, TaskView


def _usd(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def run_params(view: RunView) -> proto.RunParams:
    return proto.RunParams(
        run_id=view.run_id,
        epic_id=view.epic_id,
        status=view.shown_status,
        done=view.count("done"),
        failed=view.count("failed"),
        skipped=view.count("skipped"),
        total=view.total,
    )


def lane_params(view: RunView, lane: LaneView) -> proto.LaneParams:
    task = lane.task
    return proto.LaneParams(
        run_id=view.run_id,
        lane=lane.lane,
        title=lane.title,
        status=lane.status,
        executor=lane.executor,
        clone=lane.clone,
        task=proto.LaneTask(index=task.index, count=lane.count, title=task.title) if task else None,
        tokens=lane.tokens,
        cost_usd=_usd(lane.cost_usd),
        estimated=lane.estimated,
        reason=lane.reason or None,
        flaky=lane.flaky or None,
        merge_revision=lane.merge_revision or None,
        node=lane.node,
        port=lane.port,
        ports=lane.ports,
        batch=lane.batch,
    )


def task_params(view: RunView, lane: LaneView, task: TaskView) -> proto.TaskParams:
    return proto.TaskParams(
        run_id=view.run_id,
        lane=lane.lane,
        index=task.index,
        count=lane.count,
        title=task.title,
        state=proto.TaskState(task.state),
        satisfies=task.satisfies,
        parallel=task.parallel,
        executor=task.executor,
        clone=task.clone,
    )


def cost_params(view: RunView) -> proto.CostParams:
    return proto.CostParams(
        run_id=view.run_id,
        tokens=view.totals.tokens,
        cost_usd=_usd(view.totals.cost_usd),
        estimated_tokens=view.totals.estimated_tokens,
        unpriced_tokens=view.totals.unpriced_tokens,
        budget_usd=view.budget_usd,
    )


def status_run(view: RunView, started_at: str | None = None) -> proto.StatusRun:
    """One run of `flow/status`; `started_at` stands in when the trace has not said it yet."""
    totals = view.totals
    return proto.StatusRun(
        run_id=view.run_id,
        epic_id=view.epic_id,
        status=view.shown_status,
        started_at=view.started_at or started_at,
        ended_at=view.ended_at,
        plan=view.plan,
        epic_branch=view.epic_branch,
        lanes=[lane_params(view, lane) for lane in view.lanes.values()],
        totals=proto.RunTotals(
            tokens=totals.tokens,
            cost_usd=_usd(totals.cost_usd),
            estimated_tokens=totals.estimated_tokens,
            unpriced_tokens=totals.unpriced_tokens,
            budget_usd=view.budget_usd,
            requests=totals.requests,
        ),
        clones=[
            proto.HeldClone(executor=c.executor, clone=c.clone, role=c.role, label=c.label)
            for c in view.clones.values()
            if c.held
        ],
        exclusions=[
            proto.Exclusion(executor=k, reason=v.get("reason"), until=v.get("until"))
            for k, v in view.exclusions.items()
        ],
    )


# The plain dicts the notifier and `flowd status --json` send.
def run_wire(view: RunView) -> dict[str, Any]:
    return run_params(view).wire()


def lane_wire(view: RunView, lane: LaneView) -> dict[str, Any]:
    return lane_params(view, lane).wire()


def task_wire(view: RunView, lane: LaneView, task: TaskView) -> dict[str, Any]:
    return task_params(view, lane, task).wire()


def cost_wire(view: RunView) -> dict[str, Any]:
    return cost_params(view).wire()


def status_wire(view: RunView, started_at: str | None = None) -> dict[str, Any]:
    return status_run(view, started_at).wire()
