"""A run view's protocol shapes (docs/protocol.md), built through the declared models.

The fold (`flowd/trace/view.py`) is pure run state; this module says how that state looks on the
wire: `flow/run`, `flow/lane`, `flow/task` and `flow/cost` params, and a `flow/status` run (also
what `flowd status --json` prints). Every shape goes through its model in
`flowd.protocol.models`, so a misspelt or missing field fails here rather than at the editor.

With `Places`, the shapes carry where a run's things are (its branches, worktrees, report and
findings, named by `flowd/base/layout.py`), so the editors receive those names and never build
them; without (a view with no repository behind it), those fields are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowd.base import layout
from flowd.protocol import models as proto

if TYPE_CHECKING:
    from flowd.trace.view import LaneView, RunView, TaskView


@dataclass(frozen=True)
class Places:
    """Where one repository keeps its runs' things: its main checkout (where `.flow/` is) and the
    root its story worktrees are made under (`worktreeRoot`, docs/repositories.md). The names of
    an epic and of a story never change, so each is made once (lane notes are the hot path)."""

    repo: Path
    worktree_root: Path
    _runs: dict[str, tuple[str, str]] = field(default_factory=dict, compare=False, repr=False)
    _stories: dict[tuple[str, str], tuple[str, str, str]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def reports(self, epic: str) -> tuple[str, str]:
        """The epic report's Markdown and JSON files."""
        if epic not in self._runs:
            self._runs[epic] = (
                str(self.repo / layout.report_markdown(epic)),
                str(self.repo / layout.report_json(epic)),
            )
        return self._runs[epic]

    def of_story(self, epic: str, story: str) -> tuple[str, str, str]:
        """The story's worktree, branch and findings file."""
        key = (epic, story)
        if key not in self._stories:
            self._stories[key] = (
                str(layout.story_worktree(self.worktree_root, epic, story)),
                layout.story_branch(epic, story),
                str(self.repo / layout.story_findings(epic, story)),
            )
        return self._stories[key]


def _usd(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def epic_branch(view: RunView) -> str:
    """The run's epic branch: as its trace says, else the name flowd gives it."""
    return view.epic_branch or layout.epic_branch(view.epic_id)


def _run_places(view: RunView, places: Places | None) -> tuple[str | None, str | None, str | None]:
    """The run's epic branch and its report's two files, when the repository is known."""
    if places is None or not view.epic_id:
        return None, None, None
    return epic_branch(view), *places.reports(view.epic_id)


def run_params(view: RunView, places: Places | None = None) -> proto.RunParams:
    branch, report_markdown, report_json = _run_places(view, places)
    return proto.RunParams(
        run_id=view.run_id,
        epic_id=view.epic_id,
        status=view.shown_status,
        done=view.count("done"),
        failed=view.count("failed"),
        skipped=view.count("skipped"),
        total=view.total,
        epic_branch=branch,
        report_markdown=report_markdown,
        report_json=report_json,
    )


def _lane_places(
    view: RunView, lane: LaneView, places: Places | None
) -> tuple[str | None, str | None, str | None]:
    """The story's worktree, branch and findings file, when the repository is known."""
    if places is None or not view.epic_id:
        return None, None, None
    return places.of_story(view.epic_id, lane.lane)


def lane_params(view: RunView, lane: LaneView, places: Places | None = None) -> proto.LaneParams:
    task = lane.task
    worktree, branch, findings = _lane_places(view, lane, places)
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
        worktree=worktree,
        branch=branch,
        findings=findings,
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


def status_run(view: RunView, started_at: str | None = None, places: Places | None = None) -> proto.StatusRun:
    """One run of `flow/status`; `started_at` stands in when the trace has not said it yet."""
    totals = view.totals
    branch, report_markdown, report_json = _run_places(view, places)
    return proto.StatusRun(
        run_id=view.run_id,
        epic_id=view.epic_id,
        status=view.shown_status,
        started_at=view.started_at or started_at,
        ended_at=view.ended_at,
        plan=view.plan,
        epic_branch=branch or view.epic_branch,
        report_markdown=report_markdown,
        report_json=report_json,
        lanes=[lane_params(view, lane, places) for lane in view.lanes.values()],
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
def run_wire(view: RunView, places: Places | None = None) -> dict[str, Any]:
    return run_params(view, places).wire()


def lane_wire(view: RunView, lane: LaneView, places: Places | None = None) -> dict[str, Any]:
    return lane_params(view, lane, places).wire()


def task_wire(view: RunView, lane: LaneView, task: TaskView) -> dict[str, Any]:
    return task_params(view, lane, task).wire()


def cost_wire(view: RunView) -> dict[str, Any]:
    return cost_params(view).wire()


def status_wire(view: RunView, started_at: str | None = None, places: Places | None = None) -> dict[str, Any]:
    return status_run(view, started_at, places).wire()
