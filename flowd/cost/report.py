"""The cross-run cost report (docs/cost.md): every section rolled up from a usage fold
(`flowd.cost.fold`) at the end."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import date, tzinfo
from typing import Any

from flowd.cost.fold import (
    Acc,
    UsageFold,
    WhenKey,
    WhoKey,
    as_zone,
    fold_usage,
    merge_into,
    zone_label,
)
from flowd.cost.model import (
    AgentRow,
    Averages,
    Bucket,
    BudgetRow,
    CostReport,
    ExecutorRow,
    ModelRow,
    Projection,
    Skipped,
    StoryRow,
    Unpriced,
    add_costs,
)
from flowd.cost.prices import UNITS_PER_USD, Prices, prices_as_of, usd_of
from flowd.cost.samples import UNKNOWN_MODEL, Sample, ScanStats

DAYS_PER_MONTH = 30


def build_report(
    samples: Iterable[Sample],
    *,
    prices: Prices | None = None,
    tz: str | tzinfo | None = None,
    since: str | None = None,
    until: str | None = None,
    runs_per_day: float | None = None,
    stats: ScanStats | None = None,
    run_id: str | None = None,
) -> CostReport:
    """The report over `samples`. `since` (inclusive) and `until` (exclusive) are ISO-8601 UTC
    times in the trace's format (`…T…:…:….mmmZ`). `stats` is read after the samples are exhausted
    (a scan fills it as it goes): skipped files/lines and the runs' budgets."""
    zone = as_zone(tz)
    folded = fold_usage(samples, prices=prices, tz=zone, since=since, until=until)
    return report_from_fold(folded, tz=zone, runs_per_day=runs_per_day, stats=stats, run_id=run_id)


def report_from_fold(
    folded: UsageFold,
    *,
    tz: str | tzinfo | None = None,
    runs_per_day: float | None = None,
    stats: ScanStats | None = None,
    run_id: str | None = None,
) -> CostReport:
    """The report rolled up from a fold (`build_report` is `fold_usage` then this)."""
    report = _roll_up(folded.when, folded.who, as_zone(tz), prices_as_of(), runs_per_day)
    report.from_, report.to = folded.first, folded.last
    if stats is not None:
        report.skipped = Skipped(
            files=stats.skipped_files, lines=stats.skipped_lines, problems=stats.problems
        )
        report.budgets = _budgets(folded.when, stats, run_id)
    return report


def _roll_up(
    when: dict[WhenKey, Acc],
    who: dict[WhoKey, Acc],
    zone: tzinfo,
    as_of: str,
    runs_per_day: float | None,
) -> CostReport:
    measured, estimated, unpriced = Acc(), Acc(), Acc()
    unpriced_models: set[str] = set()
    runs: set[str] = set()
    days: dict[str, tuple[Acc, Acc, set[str]]] = {}
    hours: dict[str, tuple[Acc, Acc, set[str]]] = {}
    models: dict[tuple[str, bool], Acc] = {}
    agents: dict[str, Acc] = {}
    executors: dict[str, Acc] = {}
    stories: dict[str, Acc] = {}

    for (run, hour, model, is_estimated), acc in when.items():
        runs.add(run)
        (estimated if is_estimated else measured).merge(acc)
        if acc.unpriced_requests:
            unpriced.merge(acc)
            unpriced_models.add(model or UNKNOWN_MODEL)
        for table, bucket_key in ((days, hour[:10]), (hours, hour)):
            row = table.get(bucket_key)
            if row is None:
                row = table[bucket_key] = (Acc(), Acc(), set())
            (row[1] if is_estimated else row[0]).merge(acc)
            row[2].add(run)
        merge_into(models, (model or UNKNOWN_MODEL, is_estimated), acc)
    for (agent, executor, clone, lane), acc in who.items():
        merge_into(agents, agent, acc)
        # docs/cost.md: byExecutor counts coder usage per clone (`id#clone`); other roles' turns are
        # leased per call and carry no clone, so they are counted in byAgent, not here.
        if executor is not None and clone is not None:
            merge_into(executors, f"{executor}#{clone}", acc)
        if lane is not None:
            merge_into(stories, lane, acc)

    tokens = measured.total + estimated.total
    cost = add_costs(measured.totals().cost_usd, estimated.totals().cost_usd)
    report = CostReport(
        time_zone=zone_label(zone),
        prices_as_of=as_of,
        runs=len(runs),
        requests=measured.requests + estimated.requests,
        measured=measured.totals(),
        estimated=estimated.totals(),
        unpriced=Unpriced(
            requests=unpriced.unpriced_requests,
            tokens=unpriced.unpriced_tokens,
            models=sorted(unpriced_models),
        ),
        by_day=_buckets(days),
        by_hour=_buckets(hours),
        by_model=[
            ModelRow(model=name, estimated=est, totals=acc.totals())
            for (name, est), acc in sorted(models.items(), key=lambda item: (item[0][1], item[0][0]))
        ],
        by_agent=[
            AgentRow(agent=name, totals=acc.totals(), share=_share(acc.total, tokens))
            for name, acc in _by_total(agents)
        ],
        by_executor=[
            ExecutorRow(
                executor=name, totals=executors[name].totals(), share=_share(executors[name].total, tokens)
            )
            for name in sorted(executors, key=natural_key)
        ],
        by_story=[
            StoryRow(story=name, totals=acc.totals(), share=_share(acc.total, tokens))
            for name, acc in _by_total(stories)
        ],
    )
    report._executor_ids = sorted({key[1] for key in who if key[1] is not None}, key=natural_key)
    report.averages = _averages(report, days, hours, tokens, cost)
    if runs_per_day is not None:
        report.projection = _projection(runs_per_day, len(runs), tokens, cost)
    return report


def _buckets(table: dict[str, tuple[Acc, Acc, set[str]]]) -> list[Bucket]:
    return [
        Bucket(key=key, runs=len(runs), measured=m.totals(), estimated=e.totals())
        for key, (m, e, runs) in sorted(table.items())
    ]


def _by_total(table: dict[str, Acc]) -> list[tuple[str, Acc]]:
    return sorted(table.items(), key=lambda item: (-item[1].total, natural_key(item[0])))


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """`codex#2` before `codex#10`: digit runs compare as numbers."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(text) if part)


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def half_up(value: float) -> int:
    """Round half up (Python's `round` is banker's: 2.5 → 2)."""
    return math.floor(value + 0.5)


def _ratio(value: int, divisor: int) -> int:
    return half_up(value / divisor) if divisor else 0


def _cost_ratio(cost: float | None, divisor: int) -> float | None:
    return round(cost / divisor, 6) if cost is not None and divisor else None


def _averages(
    report: CostReport,
    days: dict[str, tuple[Acc, Acc, set[str]]],
    hours: dict[str, tuple[Acc, Acc, set[str]]],
    tokens: int,
    cost: float | None,
) -> Averages:
    calendar_days = 0
    if days:
        first, last = date.fromisoformat(min(days)), date.fromisoformat(max(days))
        calendar_days = (last - first).days + 1
    divisors = {
        "active_day": len(days),
        "calendar_day": calendar_days,
        "active_hour": len(hours),
        "run": report.runs,
        "request": report.requests,
    }
    values: dict[str, Any] = {
        "active_days": len(days),
        "calendar_days": calendar_days,
        "active_hours": len(hours),
    }
    for name, divisor in divisors.items():
        values[f"tokens_per_{name}"] = _ratio(tokens, divisor)
        values[f"cost_usd_per_{name}"] = _cost_ratio(cost, divisor)
    values["peak_day"] = _peak(days)
    values["peak_hour"] = _peak(hours)
    return Averages(**values)


def _peak(table: dict[str, tuple[Acc, Acc, set[str]]]) -> str | None:
    best: str | None = None
    best_tokens = -1
    for key in sorted(table):  # earliest wins a tie
        m, e, _ = table[key]
        if m.total + e.total > best_tokens:
            best, best_tokens = key, m.total + e.total
    return best


def _projection(runs_per_day: float, runs: int, tokens: int, cost: float | None) -> Projection:
    per_run = tokens / runs if runs else 0.0
    cost_per_run = cost / runs if cost is not None and runs else None
    per_day = per_run * runs_per_day
    cost_per_day = cost_per_run * runs_per_day if cost_per_run is not None else None
    return Projection(
        runs_per_day=runs_per_day,
        tokens_per_day=half_up(per_day),
        tokens_per_month=half_up(per_day * DAYS_PER_MONTH),
        cost_usd_per_day=round(cost_per_day, 6) if cost_per_day is not None else None,
        cost_usd_per_month=round(cost_per_day * DAYS_PER_MONTH, 6) if cost_per_day is not None else None,
    )


def _budgets(when: dict[WhenKey, Acc], stats: ScanStats, run_id: str | None) -> list[BudgetRow]:
    spent: dict[str, int] = {}
    for key, acc in when.items():
        spent[key[0]] = spent.get(key[0], 0) + acc.cost
    rows: list[BudgetRow] = []
    for run, budget in sorted(stats.budgets.items()):
        if run not in spent and run != run_id:
            continue
        units = spent.get(run, 0)
        used = units / UNITS_PER_USD
        rows.append(
            BudgetRow(
                run_id=run,
                epic_id=stats.epics.get(run),
                budget_usd=budget,
                spent_usd=usd_of(units),
                remaining_usd=round(max(0.0, budget - used), 6),
                exceeded=used >= budget,
            )
        )
    return rows
