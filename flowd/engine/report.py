"""The epic report (`report.json`, `report.md`): every story's outcome with its tokens and cost,
written at the end of every run (cancelled and halted ones too). Built from the run's fold and the
folds of the epic's earlier runs: a story's figures and the epic totals span every run of the
epic (a story merged two runs ago still shows what it cost), beside this run's own totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowd.base.fsio import write_json_atomic, write_text_atomic
from flowd.base.wire import WireModel
from flowd.engine import epicgraph
from flowd.engine.pictures import mermaid_blocks, render_html
from flowd.engine.state import EpicPaths
from flowd.events.statuses import ReportStatus, report_status
from flowd.plan.model import StoryPlan
from flowd.trace.log import fold_trace, list_runs, trace_path
from flowd.trace.usage import Pricer, reported_cost
from flowd.trace.view import RunView


class StoryLine(WireModel):
    id: str
    title: str
    status: ReportStatus
    branch: str | None = None
    tokens: int = 0  # over every run of the epic, like cost_usd
    cost_usd: float | None = None
    estimated: bool = False
    executor: str | None = None
    note: str | None = None
    merge_revisions: int | None = None  # merge revision rounds taken (docs/revisions.md)
    flaky_gates: int | None = None  # gates green only on a rerun, not charged to the story


class FlakyLine(WireModel):
    """A gate that was red, then green on a rerun (`GateFlaky`, docs/revisions.md)."""

    story: str | None = None
    where: str
    gate: str
    attempts: int


class BatchLine(WireModel):
    """One merge train batch (docs/merging.md)."""

    batch: int
    lanes: list[str]
    ok: bool | None = None
    duration_ms: int | None = None
    bisections: int = 0
    culprits: list[str] = []


class TrainLine(WireModel):
    """The merge train's account (docs/merging.md): its batches and the epic gate time it took
    against merging one story at a time (an estimate from the median green batch's run)."""

    batches: list[BatchLine]
    bisections: int
    gate_ms: int
    one_at_a_time_ms: int
    saved_ms: int


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
    # Over every run of the epic (this one included), oldest first.
    runs: list[str] = []
    epic_tokens: int = 0
    epic_cost_usd: float | None = None
    epic_estimated_tokens: int = 0
    epic_unpriced_tokens: int = 0
    flaky_gates: list[FlakyLine] = []  # this run's
    merge_train: TrainLine | None = None  # this run's, when it merged anything


def epic_history(repo: Path, epic_id: str, run_id: str, price: Pricer = reported_cost) -> list[RunView]:
    """The folds of the epic's other runs, oldest first (what the report adds to this run's)."""
    records = [r for r in list_runs(repo) if r.epic_id == epic_id and r.run_id != run_id]
    return [
        fold_trace(trace_path(repo, r.run_id), RunView(run_id=r.run_id, pricer=price))
        for r in reversed(records)
    ]


def _add(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def _story_figures(story_id: str, views: Sequence[RunView]) -> tuple[int, float | None, bool, str | None]:
    """(tokens, cost, estimated, the run that finished it) of a story over `views`."""
    tokens, cost, estimated, done_in = 0, None, False, None
    for v in views:
        lane = v.lanes.get(story_id)
        if lane is None:
            continue
        tokens += lane.tokens
        cost = _add(cost, lane.cost_usd)
        estimated = estimated or lane.estimated
        if lane.status == "done" and lane.tokens and done_in is None:
            done_in = v.run_id
    return tokens, cost, estimated, done_in


def _coder_of(story_id: str, views: Sequence[RunView]) -> list[str]:
    """The executor whose clone coded the story in an earlier run (leases outlive their release)."""
    for v in reversed(views):
        for clone in v.clones.values():
            if clone.role == "coder" and clone.label == story_id and not clone.borrowed:
                return [clone.executor]
    return []


def build_report(
    plan: StoryPlan,
    view: RunView,
    notes: dict[str, tuple[str | None, str | None, list[str]]],
    earlier: Sequence[RunView] = (),
) -> EpicReport:
    """`notes` maps a story to (branch, note, executor chain) from its outcome; `earlier` are the
    folds of the epic's earlier runs (`epic_history`)."""
    stories: list[StoryLine] = []
    by_exec: dict[str, ExecutorLine] = {}
    views = [*earlier, view]
    for story in plan.stories:
        lane = view.lanes.get(story.id)
        branch, note, chain = notes.get(story.id, (None, None, []))
        status = report_status(lane.status if lane else None)
        reason = lane.reason if lane else None
        tokens, cost, estimated, done_in = _story_figures(story.id, views)
        if done_in is not None and done_in != view.run_id and status == "done":
            note = f"merged in run {done_in}"
        chain = chain or _coder_of(story.id, earlier)
        line = StoryLine(
            id=story.id,
            title=story.title,
            status=status,
            branch=branch,
            tokens=tokens,
            cost_usd=round(cost, 6) if cost is not None else None,
            estimated=estimated,
            executor=" → ".join(chain) if chain else None,
            note=reason or note,
            merge_revisions=max(
                (v.lanes[story.id].merge_revision for v in views if story.id in v.lanes), default=0
            )
            or None,
            flaky_gates=lane.flaky if lane and lane.flaky else None,
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
        runs=[v.run_id for v in views],
        epic_tokens=sum(v.totals.tokens for v in views),
        epic_cost_usd=_rounded(_sum_costs(views)),
        epic_estimated_tokens=sum(v.totals.estimated_tokens for v in views),
        epic_unpriced_tokens=sum(v.totals.unpriced_tokens for v in views),
        flaky_gates=[
            FlakyLine(story=f.lane, where=f.where, gate=f.gate, attempts=f.attempts) for f in view.flaky_gates
        ],
        merge_train=train_line(view),
    )


def train_line(view: RunView) -> TrainLine | None:
    """The train's batches, and its epic gate time against one at a time: one run per merge
    attempt (stories landed, culprits sent back) at the median green batch's run time, against the
    batches' own time plus each bisection run at that median."""
    if not view.batches:
        return None
    timed = sorted(b.duration_ms for b in view.batches if b.ok and b.duration_ms is not None)
    every = sorted(b.duration_ms for b in view.batches if b.duration_ms is not None)
    median = (timed or every or [0])[len(timed or every or [0]) // 2]
    bisections = sum(b.bisections for b in view.batches)
    culprits = sum(len(b.culprits) for b in view.batches)
    merged = sum(1 for lane in view.lanes.values() if lane.status == "done")
    gate_ms = sum(b.duration_ms or 0 for b in view.batches) + bisections * median
    one = (merged + culprits) * median
    return TrainLine(
        batches=[
            BatchLine(
                batch=b.batch, lanes=b.lanes, ok=b.ok, duration_ms=b.duration_ms,
                bisections=b.bisections, culprits=b.culprits,
            )
            for b in view.batches
        ],
        bisections=bisections,
        gate_ms=gate_ms,
        one_at_a_time_ms=one,
        saved_ms=one - gate_ms,
    )  # fmt: skip


def _sum_costs(views: Sequence[RunView]) -> float | None:
    total: float | None = None
    for v in views:
        total = _add(total, v.totals.cost_usd)
    return total


def _rounded(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def _money(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def render_markdown(report: EpicReport, pictures: Sequence[str] = ()) -> str:
    """The report as Markdown; `pictures` are the graph and timeline sections (`mermaid_blocks`)."""
    counts: dict[str, int] = {}
    for story in report.stories:
        counts[story.status] = counts.get(story.status, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    spans = len(report.runs) > 1
    all_runs = " (all runs)" if spans else ""
    lines = [
        f"# Epic report: {report.epic_id}",
        "",
        f"- Run: `{report.run_id}` — outcome **{report.outcome}**"
        + (f" ({report.reason})" if report.reason else ""),
        f"- Epic branch: `{report.epic_branch}`",
        f"- Stories: {len(report.stories)} ({summary})",
        f"- Tokens: {report.tokens:,}"
        + (f" ({report.estimated_tokens:,} estimated)" if report.estimated_tokens else "")
        + (" this run" if spans else ""),
        f"- Cost: {_money(report.cost_usd)}"
        + (f" (+{report.unpriced_tokens:,} unpriced tokens)" if report.unpriced_tokens else "")
        + (f" of a {_money(report.budget_usd)} budget" if report.budget_usd is not None else "")
        + (" this run" if spans else ""),
        *(_epic_lines(report) if spans else []),
        "",
        f"| Story | Status | Branch | Tokens{all_runs} | Cost{all_runs} | Executor | Note |",
        "| --- | --- | --- | ---: | ---: | --- | --- |",
    ]
    for s in report.stories:
        tokens = f"{'~' if s.estimated else ''}{s.tokens:,}" if s.tokens else "—"
        lines.append(
            f"| {s.id} | {s.status} | {f'`{s.branch}`' if s.branch else '—'} | {tokens} | {_money(s.cost_usd)} "
            f"| {_cell(s.executor) or '—'} | {_cell(s.note)} |"
        )
    lines += _revision_lines(report) + _flaky_lines(report) + _train_lines(report) + list(pictures)
    if report.by_executor:
        lines += ["", "## By executor", ""]
        for e in report.by_executor:
            lines.append(
                f"- {e.executor}: {', '.join(e.stories)} — {e.tokens:,} tokens, {_money(e.cost_usd)}"
            )
    return "\n".join(lines) + "\n"


def _revision_lines(report: EpicReport) -> list[str]:
    """`## Merge revisions`: stories whose merge turned the epic gates red and went back to their coder."""
    revised = [s for s in report.stories if s.merge_revisions]
    if not revised:
        return []
    lines = ["", "## Merge revisions", ""]
    for s in revised:
        rounds = f"{s.merge_revisions} round{'s' if s.merge_revisions != 1 else ''}"
        lines.append(
            f"- {s.id}: {rounds} (epic gates red after merging; merge undone, sent back to its coder)"
        )
    return lines


def _flaky_lines(report: EpicReport) -> list[str]:
    """`## Flaky gates`: red, then green on a rerun; passed and not charged to their story."""
    if not report.flaky_gates:
        return []
    lines = [
        "",
        "## Flaky gates",
        "",
        "Red, then green when run again: passed, not charged to the story.",
        "",
    ]
    for f in report.flaky_gates:
        runs = f"{f.attempts} red run{'s' if f.attempts != 1 else ''}"
        lines.append(f"- {f.story or 'epic'} ({f.where} gate): `{_cell(f.gate)}` — {runs} before green")
    return lines


def _train_lines(report: EpicReport) -> list[str]:
    """`## Merge train`: each batch, its bisections, and the gate time saved (docs/merging.md)."""
    train = report.merge_train
    if train is None:
        return []
    lines = [
        "",
        "## Merge train",
        "",
        f"{len(train.batches)} batch(es), {train.bisections} bisection run(s); epic gates "
        f"{train.gate_ms / 1000:.1f} s against about {train.one_at_a_time_ms / 1000:.1f} s one story "
        f"at a time: {train.saved_ms / 1000:.1f} s saved.",
        "",
    ]
    for b in train.batches:
        verdict = "green" if b.ok else "red" if b.ok is False else "not finished"
        took = f" in {b.duration_ms / 1000:.1f} s" if b.duration_ms is not None else ""
        more = (
            f"; bisected ({b.bisections} run(s)), culprit(s) {', '.join(b.culprits)}" if b.bisections else ""
        )
        if b.culprits and not b.bisections:
            more = f"; culprit {', '.join(b.culprits)}"
        lines.append(f"- batch {b.batch}: {', '.join(b.lanes)} — {verdict}{took}{more}")
    return lines


def _epic_lines(report: EpicReport) -> list[str]:
    extra = [
        f"{report.epic_estimated_tokens:,} estimated" if report.epic_estimated_tokens else "",
        f"+{report.epic_unpriced_tokens:,} unpriced tokens" if report.epic_unpriced_tokens else "",
    ]
    shown = ", ".join(e for e in extra if e)
    return [
        f"- Epic so far, over {len(report.runs)} runs: {report.epic_tokens:,} tokens, "
        f"{_money(report.epic_cost_usd)}" + (f" ({shown})" if shown else "")
    ]


def write_report(paths: EpicPaths, report: EpicReport, view: RunView | None = None) -> None:
    """`report.json` and `report.md`; with the run's fold, the graph and timeline too, in
    `report.md` as Mermaid and in `report.html` as a page of its own (docs/graph.md)."""
    data: dict[str, Any] = report.model_dump(mode="json", by_alias=True, exclude_none=True)
    write_json_atomic(paths.report_json, data)
    if view is None:
        write_text_atomic(paths.report_md, render_markdown(report))
        return
    graph, timeline = epicgraph.graph(view), epicgraph.timeline(view)
    write_text_atomic(paths.report_md, render_markdown(report, mermaid_blocks(graph, timeline)))
    title = f"Epic report: {report.epic_id}"
    write_text_atomic(
        paths.report_md.with_suffix(".html"), render_html(title, summary_lines(report), graph, timeline)
    )


def summary_lines(report: EpicReport) -> list[str]:
    """The report's head as plain lines (the HTML page's)."""
    counts: dict[str, int] = {}
    for story in report.stories:
        counts[story.status] = counts.get(story.status, 0) + 1
    return [
        f"Run {report.run_id}: {report.outcome}" + (f" ({report.reason})" if report.reason else ""),
        f"Epic branch: {report.epic_branch}",
        f"Stories: {len(report.stories)} (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")",
        f"Tokens: {report.tokens:,}; cost: {_money(report.cost_usd)}",
    ]
