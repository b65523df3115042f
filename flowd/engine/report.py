"""The epic report (`report.json`, `report.md`): every story's outcome with its tokens and cost,
written at the end of every run (cancelled and halted ones too). Built from the run's fold.
"""

from __future__ import annotations

from typing import Any

from flowd.engine.state import EpicPaths
from flowd.fsio import write_json_atomic, write_text_atomic
from flowd.plan.model import StoryPlan
from flowd.view import RunView
from flowd.wire import WireModel


class StoryLine(WireModel):
    id: str
    title: str
    status: str
    branch: str | None = None
    tokens: int = 0
    cost_usd: float | None = None
    estimated: bool = False
    executor: str | None = None
    note: str | None = None


class ExecutorLine(WireModel):
    executor: str
    stories: list[str]
    tokens: int
    cost_usd: float | None = None


class EpicReport(WireModel):
    schema_version: int = 1
    run_id: str
    epic_id: str
    epic_branch: str
    outcome: str
    reason: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    stories: list[StoryLine]
    by_executor: list[ExecutorLine]
    tokens: int
    cost_usd: float | None = None
    estimated_tokens: int
    unpriced_tokens: int
    budget_usd: float | None = None


def build_report(
    plan: StoryPlan, view: RunView, notes: dict[str, tuple[str | None, str | None, list[str]]]
) -> EpicReport:
    """`notes` maps a story to (branch, note, executor chain) from its outcome."""
    stories: list[StoryLine] = []
    by_exec: dict[str, ExecutorLine] = {}
    for story in plan.stories:
        lane = view.lanes.get(story.id)
        branch, note, chain = notes.get(story.id, (None, None, []))
        status = lane.status if lane else "planned"
        reason = lane.reason if lane else None
        line = StoryLine(
            id=story.id,
            title=story.title,
            status=status,
            branch=branch,
            tokens=lane.tokens if lane else 0,
            cost_usd=round(lane.cost_usd, 6) if lane and lane.cost_usd is not None else None,
            estimated=lane.estimated if lane else False,
            executor=" → ".join(chain) if chain else None,
            note=reason or note,
        )
        stories.append(line)
        if chain:
            group = by_exec.setdefault(chain[-1], ExecutorLine(executor=chain[-1], stories=[], tokens=0))
            group.stories.append(story.id if len(chain) == 1 else f"{story.id} ({' → '.join(chain)})")
            group.tokens += line.tokens
            if line.cost_usd is not None:
                group.cost_usd = round((group.cost_usd or 0.0) + line.cost_usd, 6)
    totals = view.totals
    return EpicReport(
        run_id=view.run_id,
        epic_id=plan.epic_id,
        epic_branch=plan.epic_branch,
        outcome=view.status,
        reason=view.reason,
        started_at=view.started_at,
        ended_at=view.ended_at,
        stories=stories,
        by_executor=sorted(by_exec.values(), key=lambda e: e.executor),
        tokens=totals.tokens,
        cost_usd=round(totals.cost_usd, 6) if totals.cost_usd is not None else None,
        estimated_tokens=totals.estimated_tokens,
        unpriced_tokens=totals.unpriced_tokens,
        budget_usd=view.budget_usd,
    )


def _money(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def render_markdown(report: EpicReport) -> str:
    counts: dict[str, int] = {}
    for story in report.stories:
        counts[story.status] = counts.get(story.status, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    lines = [
        f"# Epic report: {report.epic_id}",
        "",
        f"- Run: `{report.run_id}` — outcome **{report.outcome}**"
        + (f" ({report.reason})" if report.reason else ""),
        f"- Epic branch: `{report.epic_branch}`",
        f"- Stories: {len(report.stories)} ({summary})",
        f"- Tokens: {report.tokens:,}"
        + (f" ({report.estimated_tokens:,} estimated)" if report.estimated_tokens else ""),
        f"- Cost: {_money(report.cost_usd)}"
        + (f" (+{report.unpriced_tokens:,} unpriced tokens)" if report.unpriced_tokens else "")
        + (f" of a {_money(report.budget_usd)} budget" if report.budget_usd is not None else ""),
        "",
        "| Story | Status | Branch | Tokens | Cost | Executor | Note |",
        "| --- | --- | --- | ---: | ---: | --- | --- |",
    ]
    for s in report.stories:
        tokens = f"{'~' if s.estimated else ''}{s.tokens:,}" if s.tokens else "—"
        lines.append(
            f"| {s.id} | {s.status} | {f'`{s.branch}`' if s.branch else '—'} | {tokens} | {_money(s.cost_usd)} "
            f"| {_cell(s.executor) or '—'} | {_cell(s.note)} |"
        )
    if report.by_executor:
        lines += ["", "## By executor", ""]
        for e in report.by_executor:
            lines.append(
                f"- {e.executor}: {', '.join(e.stories)} — {e.tokens:,} tokens, {_money(e.cost_usd)}"
            )
    return "\n".join(lines) + "\n"


def write_report(paths: EpicPaths, report: EpicReport) -> None:
    data: dict[str, Any] = report.model_dump(mode="json", by_alias=True, exclude_none=True)
    write_json_atomic(paths.report_json, data)
    write_text_atomic(paths.report_md, render_markdown(report))
