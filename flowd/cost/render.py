"""The cost report as text (aligned tables for a terminal), Markdown, or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flowd.base.jsonl import dumps_indented
from flowd.base.timeutil import parse_iso
from flowd.cost.model import Bucket, CostReport, Totals
from flowd.cost.samples import UNKNOWN_MODEL

EMPTY = "no usage recorded: run an epic (`flowd run PLAN`) and its agents' token counts will show here"
COST_NOTE = (
    "costs are what the agents reported where they did, otherwise priced from {as_of} by model "
    "(USD per million tokens; [prices.<model>] in .flow/config.toml overrides)"
)
ESTIMATE_NOTE = (
    "estimated rows come from character counts (characters / 4), not from the agents' token counts"
)
UNPRICED_NOTE = "unpriced usage has no price for its model and is not in any $ figure"
HIDDEN_NOTE = (
    "executor {row.executor} runs {row.program}, which makes model requests flowd cannot see: "
    "{row.requests}; the figures above miss the ones not counted"
)


def render(report: CostReport, fmt: str = "text") -> str:
    if fmt == "json":
        return dumps_indented(report.wire()).decode() + "\n"
    if fmt in ("md", "markdown"):
        return render_markdown(report)
    return render_text(report)


# -- shared pieces ----------------------------------------------------------------------------------
def _n(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def _usd(value: float | None) -> str:
    if value is None:
        return "–"
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def _cost(*totals: Totals) -> float | None:
    known = [t.cost_usd for t in totals if t.cost_usd is not None]
    return sum(known) if known else None


def _zone(report: CostReport) -> tzinfo | None:
    try:
        return ZoneInfo(report.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _local(report: CostReport, at: str | None) -> str:
    if at is None:
        return "–"
    zone = _zone(report)
    moment = parse_iso(at)
    return (moment.astimezone(zone) if zone else moment).strftime("%Y-%m-%d %H:%M")


def _totals_line(totals: Totals) -> str:
    cached = []
    if totals.cached_read:
        cached.append(f"{_n(totals.cached_read)} cache read")
    if totals.cache_write:
        cached.append(f"{_n(totals.cache_write)} cache write")
    extra = f" ({', '.join(cached)})" if cached else ""
    cost = f" · {_usd(totals.cost_usd)}" if totals.cost_usd is not None else ""
    return (
        f"{_plural(totals.requests, 'request')}: {_n(totals.input)} in{extra}, {_n(totals.output)} out, "
        f"{_n(totals.total)} total{cost}"
    )


def _bucket_rows(buckets: Sequence[Bucket]) -> list[list[str]]:
    return [
        [
            b.key,
            _n(b.runs),
            _n(b.measured.total),
            _n(b.estimated.total),
            _usd(_cost(b.measured, b.estimated)),
        ]
        for b in buckets
    ]


_BUCKET_HEAD = ["runs", "measured", "estimated", "cost"]


def _sections(report: CostReport) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, shared by text and Markdown."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    out.append(("By day", ["day", *_BUCKET_HEAD], _bucket_rows(report.by_day)))
    out.append(("By hour", ["hour", *_BUCKET_HEAD], _bucket_rows(report.by_hour)))
    out.append(
        (
            "By model",
            ["model", "requests", "input", "output", "total", "cost"],
            [
                [
                    f"{row.model} (estimated)" if row.estimated else row.model,
                    _n(row.totals.requests),
                    _n(row.totals.input),
                    _n(row.totals.output),
                    _n(row.totals.total),
                    _usd(row.totals.cost_usd),
                ]
                for row in report.by_model
            ],
        )
    )
    for title, head, rows in (
        ("By agent (role)", "agent", [(r.agent, r.totals, r.share) for r in report.by_agent]),
        (
            # Only coders hold a lane's clone (docs/cost.md), so this table sums to the coder row.
            "By executor clone (coder turns only)",
            "executor",
            [(r.executor, r.totals, r.share) for r in report.by_executor],
        ),
        ("By story", "story", [(r.story, r.totals, r.share) for r in report.by_story]),
    ):
        if rows:
            out.append(
                (
                    title,
                    [head, "requests", "tokens", "share", "cost"],
                    [
                        [name, _n(t.requests), _n(t.total), f"{round(share * 100):d}%", _usd(t.cost_usd)]
                        for name, t, share in rows
                    ],
                )
            )
    if report.budgets:
        out.append(
            (
                "Budgets",
                ["run", "epic", "budget", "spent", "left", "state"],
                [
                    [
                        b.run_id,
                        b.epic_id or "–",
                        _usd(b.budget_usd),
                        _usd(b.spent_usd),
                        _usd(b.remaining_usd),
                        "spent" if b.exceeded else "ok",
                    ]
                    for b in report.budgets
                ],
            )
        )
    return out


def _summary(report: CostReport) -> list[str]:
    lines = [
        f"window: {_local(report, report.from_)} → {_local(report, report.to)} ({report.time_zone})",
        f"runs: {report.runs:,} · requests: {report.requests:,} · tokens: {report.tokens:,}"
        + (f" · cost: {_usd(report.cost_usd)}" if report.cost_usd is not None else ""),
        f"measured: {_totals_line(report.measured)}",
        f"estimated: {_totals_line(report.estimated)}",
    ]
    if report.unpriced.requests:
        lines.append(
            f"unpriced: {_plural(report.unpriced.requests, 'request')}, {report.unpriced.tokens:,} tokens "
            f"from {_models(report.unpriced.models)}"
        )
    return lines


def _models(models: list[str]) -> str:
    """`a, b` — a turn whose agent named no model (`(unknown)` in the JSON) reads as words."""
    names = [m for m in models if m != UNKNOWN_MODEL]
    if len(names) < len(models):
        names.append("turns that named no model")
    return ", ".join(names) or "turns that named no model"


def _average_lines(report: CostReport) -> list[str]:
    a = report.averages

    def cost(value: float | None) -> str:
        return f" ({_usd(value)})" if value is not None else ""

    lines = [
        f"per active day: {a.tokens_per_active_day:,} tokens{cost(a.cost_usd_per_active_day)} "
        f"over {_plural(a.active_days, 'day')}",
        f"per calendar day: {a.tokens_per_calendar_day:,} tokens{cost(a.cost_usd_per_calendar_day)} "
        f"over {_plural(a.calendar_days, 'day')}",
        f"per active hour: {a.tokens_per_active_hour:,} tokens{cost(a.cost_usd_per_active_hour)} "
        f"over {_plural(a.active_hours, 'hour')}",
        f"per run: {a.tokens_per_run:,} tokens{cost(a.cost_usd_per_run)}",
        f"per request: {a.tokens_per_request:,} tokens{cost(a.cost_usd_per_request)}",
    ]
    if a.peak_day and a.peak_hour:
        lines.append(f"peak day {a.peak_day}, peak hour {a.peak_hour}")
    p = report.projection
    if p is not None:
        rpd = f"{p.runs_per_day:g}"
        lines.append(
            f"projection at {rpd} runs/day: {p.tokens_per_day:,} tokens{cost(p.cost_usd_per_day)} per day, "
            f"{p.tokens_per_month:,} tokens{cost(p.cost_usd_per_month)} per 30-day month"
        )
    return lines


def _notes(report: CostReport) -> list[str]:
    notes = [COST_NOTE.format(as_of=report.prices_as_of)]
    if report.estimated.requests:
        notes.append(ESTIMATE_NOTE)
    if report.unpriced.requests:
        notes.append(UNPRICED_NOTE)
    notes += [HIDDEN_NOTE.format(row=row) for row in report.hidden_requests]
    return notes


def _skipped(report: CostReport) -> list[str]:
    s = report.skipped
    if not (s.files or s.lines):
        return []
    lines = [f"skipped: {_plural(s.files, 'unreadable trace')}, {_plural(s.lines, 'unreadable usage line')}"]
    lines += s.problems
    return lines


# -- text -------------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        # The first column is a name (left-aligned); the others are figures (right-aligned).
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return (indent + "  ".join(parts)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def render_text(report: CostReport) -> str:
    if not report.requests:
        return "\n".join(["flowd cost", "", EMPTY, *_spaced(_skipped(report))]) + "\n"
    out = ["flowd cost", *_summary(report), "", "averages (measured + estimated):"]
    out += [f"  {line}" for line in _average_lines(report)]
    for title, header, rows in _sections(report):
        out += ["", f"{title.lower()}:", *_table(header, rows)]
    out += ["", *(f"* {note}" for note in _notes(report))]
    out += _spaced(_skipped(report))
    return "\n".join(out) + "\n"


def _spaced(lines: list[str]) -> list[str]:
    return ["", *lines] if lines else []


# -- Markdown ---------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return [
        "| " + " | ".join(_md_cell(h) for h in header) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows),
    ]


def render_markdown(report: CostReport) -> str:
    out = ["# flowd cost", ""]
    if not report.requests:
        out.append(EMPTY)
        skipped = _skipped(report)
        if skipped:
            out += ["", *(f"- {line}" for line in skipped)]
        return "\n".join(out) + "\n"
    out += [f"- {line}" for line in _summary(report)]
    out += ["", "## Averages (measured + estimated)", "", *(f"- {line}" for line in _average_lines(report))]
    for title, header, rows in _sections(report):
        out += ["", f"## {title}", "", *_md_table(header, rows)]
    out += ["", "## Notes", "", *(f"- {note}" for note in _notes(report))]
    out += [f"- {line}" for line in _skipped(report)]
    return "\n".join(out) + "\n"
