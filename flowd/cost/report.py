"""The cross-run cost report (docs/cost.md): a pure, streaming fold of usage samples.

Samples are aggregated as they arrive into two small tables of accumulators, one keyed by
(run, local hour, model, estimated) and one by (agent, executor, clone, story), so memory grows
with the variety of the usage, never with its volume; every section of the report is rolled up
from those two at the end. Buckets are local hours and days of the report's IANA zone (zoneinfo, so DST is right:
the repeated hour of a fall-back night is one `HH:00` bucket holding both).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import Field, PrivateAttr

from flowd.base.wire import WireModel
from flowd.cost.prices import UNITS_PER_USD, Prices, prices_as_of, to_units, usd_of
from flowd.cost.samples import UNKNOWN_MODEL, Sample, ScanStats

SCHEMA_VERSION = 1
DAYS_PER_MONTH = 30


# -- the report's shape ---------------------------------------------------------------------------
class Totals(WireModel):
    requests: int = 0
    input: int = 0
    output: int = 0
    total: int = 0
    cached_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None  # known costs only; unpriced usage is in `unpriced`


class Unpriced(WireModel):
    requests: int = 0
    tokens: int = 0
    models: list[str] = Field(default_factory=list)


class Averages(WireModel):
    active_days: int = 0
    calendar_days: int = 0
    active_hours: int = 0
    tokens_per_active_day: int = 0
    tokens_per_calendar_day: int = 0
    tokens_per_active_hour: int = 0
    tokens_per_run: int = 0
    tokens_per_request: int = 0
    cost_usd_per_active_day: float | None = None
    cost_usd_per_calendar_day: float | None = None
    cost_usd_per_active_hour: float | None = None
    cost_usd_per_run: float | None = None
    cost_usd_per_request: float | None = None
    peak_day: str | None = None
    peak_hour: str | None = None


class Projection(WireModel):
    runs_per_day: float
    tokens_per_day: int
    tokens_per_month: int
    cost_usd_per_day: float | None = None
    cost_usd_per_month: float | None = None


class Bucket(WireModel):
    key: str
    runs: int
    measured: Totals
    estimated: Totals


class ModelRow(WireModel):
    model: str
    estimated: bool
    totals: Totals


class AgentRow(WireModel):
    agent: str
    totals: Totals
    share: float


class ExecutorRow(WireModel):
    executor: str
    totals: Totals
    share: float


class StoryRow(WireModel):
    story: str
    totals: Totals
    share: float


class BudgetRow(WireModel):
    run_id: str
    epic_id: str | None = None
    budget_usd: float
    spent_usd: float
    remaining_usd: float
    exceeded: bool


class Skipped(WireModel):
    files: int = 0
    lines: int = 0
    problems: list[str] = Field(default_factory=list)


class HiddenRequests(WireModel):
    """An executor whose agent program makes model requests flowd cannot see (docs/cost.md)."""

    executor: str
    program: str
    requests: str


class CostReport(WireModel):
    schema_version: int = SCHEMA_VERSION
    time_zone: str
    prices_as_of: str
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    runs: int = 0
    requests: int = 0
    measured: Totals = Field(default_factory=Totals)
    estimated: Totals = Field(default_factory=Totals)
    unpriced: Unpriced = Field(default_factory=Unpriced)
    averages: Averages = Field(default_factory=Averages)
    projection: Projection | None = None
    by_day: list[Bucket] = Field(default_factory=list)
    by_hour: list[Bucket] = Field(default_factory=list)
    by_model: list[ModelRow] = Field(default_factory=list)
    by_agent: list[AgentRow] = Field(default_factory=list)
    by_executor: list[ExecutorRow] = Field(default_factory=list)
    by_story: list[StoryRow] = Field(default_factory=list)
    budgets: list[BudgetRow] = Field(default_factory=list)
    skipped: Skipped = Field(default_factory=Skipped)
    hidden_requests: list[HiddenRequests] = Field(default_factory=list)
    # The executor ids the usage names (every role's turns), for the notes above; not serialised.
    _executor_ids: list[str] = PrivateAttr(default_factory=list)

    @property
    def executor_ids(self) -> list[str]:
        return list(self._executor_ids)

    def wire(self) -> dict[str, Any]:
        """The JSON shape: `costUsd: null` stays (unknown is not $0); absent optionals are dropped."""
        out = self.model_dump(mode="json", by_alias=True)
        for key in ("from", "to", "projection"):
            if out.get(key) is None:
                out.pop(key, None)
        for section in ("averages", "projection"):
            if isinstance(out.get(section), dict):
                out[section] = {k: v for k, v in out[section].items() if v is not None}
        if not out["hiddenRequests"]:
            out.pop("hiddenRequests")  # an optional addition: absent when nothing is hidden
        for row in out["budgets"]:
            if row.get("epicId") is None:
                row.pop("epicId", None)
        return out

    @property
    def tokens(self) -> int:
        return self.measured.total + self.estimated.total

    @property
    def cost_usd(self) -> float | None:
        return _add_costs(self.measured.cost_usd, self.estimated.cost_usd)


# -- aggregation ------------------------------------------------------------------------------------
class _Acc:
    """Running sums; `cost` (in 1e-15 USD, `prices.UNITS_PER_USD`: integer sums are exact in any
    order) counts only priced usage, `unpriced_*` the rest."""

    __slots__ = (
        "cache_write",
        "cached_read",
        "cost",
        "input",
        "output",
        "priced",
        "requests",
        "unpriced_requests",
        "unpriced_tokens",
    )

    def __init__(self) -> None:
        self.requests = self.input = self.output = self.cached_read = self.cache_write = 0
        self.priced = self.unpriced_requests = self.unpriced_tokens = 0
        self.cost = 0

    def merge(self, other: _Acc) -> None:
        self.requests += other.requests
        self.input += other.input
        self.output += other.output
        self.cached_read += other.cached_read
        self.cache_write += other.cache_write
        self.cost += other.cost
        self.priced += other.priced
        self.unpriced_requests += other.unpriced_requests
        self.unpriced_tokens += other.unpriced_tokens

    @property
    def total(self) -> int:
        return self.input + self.output

    def totals(self) -> Totals:
        return Totals(
            requests=self.requests,
            input=self.input,
            output=self.output,
            total=self.input + self.output,
            cached_read=self.cached_read,
            cache_write=self.cache_write,
            cost_usd=usd_of(self.cost) if self.priced else None,
        )


# (run, local hour key, model, estimated) and (agent, executor, clone, story)
_WhenKey = tuple[str, str, str | None, bool]
_WhoKey = tuple[str, str | None, int | None, str | None]


def zone_label(zone: tzinfo) -> str:
    """An IANA name as is; a fixed offset as `UTC` or `±HH:MM`."""
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return key
    offset = zone.utcoffset(None) or timedelta(0)
    if not offset:
        return "UTC"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def as_zone(tz: str | tzinfo | None) -> tzinfo:
    if tz is None:
        return UTC
    return ZoneInfo(tz) if isinstance(tz, str) else tz


@dataclass
class UsageFold:
    """What a report is rolled up from: the two tables of accumulators and the first/last time.
    Folds of disjoint samples merge into the fold of them all (`merge`), in any grouping."""

    when: dict[_WhenKey, _Acc] = field(default_factory=dict)
    who: dict[_WhoKey, _Acc] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None

    def merge(self, other: UsageFold) -> None:
        for table, theirs in ((self.when, other.when), (self.who, other.who)):
            for key, acc in theirs.items():
                _into(table, key, acc)
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first
        if other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last


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


def fold_usage(
    samples: Iterable[Sample],
    *,
    prices: Prices | None = None,
    tz: str | tzinfo | None = None,
    since: str | None = None,
    until: str | None = None,
) -> UsageFold:
    """Aggregate samples (priced one by one: tiers depend on each turn's input) into a fold."""
    prices = prices or Prices()
    zone = as_zone(tz)
    return _fold(samples, prices, zone, since, until)


def _fold(
    samples: Iterable[Sample], prices: Prices, zone: tzinfo, since: str | None, until: str | None
) -> UsageFold:
    """The samples within [since, until) summed into the two tables, with the first and last time."""
    folder = Folder(prices, zone, since, until)
    add = folder.add
    for s in samples:
        add(s)
    return folder.fold()


class Folder:
    """The exact per-sample fold: each sample filtered, bucketed and priced on its own. The
    reference the aggregated reader (`flowd.cost.aggregate`) must equal, and its path for the odd
    lines it does not sum by group; `add_group` takes what that reader summed."""

    def __init__(self, prices: Prices, zone: tzinfo, since: str | None, until: str | None) -> None:
        self.prices, self.zone, self.since, self.until = prices, zone, since, until
        self.when: dict[_WhenKey, _Acc] = {}
        self.who: dict[_WhoKey, _Acc] = {}
        self.first: str | None = None
        self.last: str | None = None
        self._hours: dict[str, str] = {}
        self._resolved = prices.resolved()

    def fold(self) -> UsageFold:
        return UsageFold(self.when, self.who, self.first, self.last)

    def add(self, s: Sample) -> None:
        at, since, until = s.at, self.since, self.until
        if (since is not None and at < since) or (until is not None and at >= until):
            return
        minute = at[:16]
        hour = self._hours.get(minute)
        if hour is None:
            hour = self._hours[minute] = local_hour(minute, self.zone)
        if not hour:
            return  # a time we cannot place (only samples built by hand can have one)
        self.span(at, at)
        cost: int | None = None
        if s.cost_usd is not None:
            cost = to_units(s.cost_usd)
        else:
            rates = self._resolved.get(s.model) if s.model is not None else None
            if rates is None:
                rates = self.prices.rates(s.model, at)
            if rates is not None:
                cost = rates.exact().units(s.input, s.output, s.cached_read, s.cache_write)
        self.add_group(
            (s.run_id, hour, s.model, s.estimated),
            (s.agent, s.executor, s.clone, s.lane),
            (1, s.input, s.output, s.cached_read, s.cache_write),
            cost,
        )

    def span(self, first: str, last: str) -> None:
        """Widen [first, last] to take in times already inside [since, until)."""
        if self.first is None or first < self.first:
            self.first = first
        if self.last is None or last > self.last:
            self.last = last

    def add_group(
        self, when: _WhenKey, who: _WhoKey, counts: tuple[int, int, int, int, int], cost: int | None
    ) -> None:
        """Add `requests, input, output, cachedRead, cacheWrite` summed over turns that share both
        keys, and their summed cost in `UNITS_PER_USD` (None: unpriced)."""
        requests, input_, output, cached_read, cache_write = counts
        for acc in (_row(self.when, when), _row(self.who, who)):
            acc.requests += requests
            acc.input += input_
            acc.output += output
            acc.cached_read += cached_read
            acc.cache_write += cache_write
            if cost is None:
                acc.unpriced_requests += requests
                acc.unpriced_tokens += input_ + output
            else:
                acc.cost += cost
                acc.priced += requests


def local_hour(minute: str, zone: tzinfo) -> str:
    # Once per distinct minute of the usage: the fields are read in place (strptime is ~10x slower),
    # and anything but `YYYY-MM-DDTHH:MM` is a time we cannot place.
    if len(minute) != 16 or minute[4] != "-" or minute[7] != "-" or minute[10] != "T" or minute[13] != ":":
        return ""
    year, month, day, hour, mins = (minute[0:4], minute[5:7], minute[8:10], minute[11:13], minute[14:16])
    if not all(p.isdigit() and p.isascii() for p in (year, month, day, hour, mins)):
        return ""
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(mins), tzinfo=UTC)
    except ValueError:
        return ""
    return moment.astimezone(zone).strftime("%Y-%m-%d %H:00")


def _roll_up(
    when: dict[_WhenKey, _Acc],
    who: dict[_WhoKey, _Acc],
    zone: tzinfo,
    as_of: str,
    runs_per_day: float | None,
) -> CostReport:
    measured, estimated, unpriced = _Acc(), _Acc(), _Acc()
    unpriced_models: set[str] = set()
    runs: set[str] = set()
    days: dict[str, tuple[_Acc, _Acc, set[str]]] = {}
    hours: dict[str, tuple[_Acc, _Acc, set[str]]] = {}
    models: dict[tuple[str, bool], _Acc] = {}
    agents: dict[str, _Acc] = {}
    executors: dict[str, _Acc] = {}
    stories: dict[str, _Acc] = {}

    for (run, hour, model, is_estimated), acc in when.items():
        runs.add(run)
        (estimated if is_estimated else measured).merge(acc)
        if acc.unpriced_requests:
            unpriced.merge(acc)
            unpriced_models.add(model or UNKNOWN_MODEL)
        for table, bucket_key in ((days, hour[:10]), (hours, hour)):
            row = table.get(bucket_key)
            if row is None:
                row = table[bucket_key] = (_Acc(), _Acc(), set())
            (row[1] if is_estimated else row[0]).merge(acc)
            row[2].add(run)
        _into(models, (model or UNKNOWN_MODEL, is_estimated), acc)
    for (agent, executor, clone, lane), acc in who.items():
        _into(agents, agent, acc)
        # docs/cost.md: byExecutor counts coder usage per clone (`id#clone`); other roles' turns are
        # leased per call and carry no clone, so they are counted in byAgent, not here.
        if executor is not None and clone is not None:
            _into(executors, f"{executor}#{clone}", acc)
        if lane is not None:
            _into(stories, lane, acc)

    tokens = measured.total + estimated.total
    cost = _add_costs(measured.totals().cost_usd, estimated.totals().cost_usd)
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


def _row(table: dict[Any, _Acc], key: Any) -> _Acc:
    row = table.get(key)
    if row is None:
        row = table[key] = _Acc()
    return row


def _into(table: dict[Any, _Acc], key: Any, acc: _Acc) -> None:
    _row(table, key).merge(acc)


def _buckets(table: dict[str, tuple[_Acc, _Acc, set[str]]]) -> list[Bucket]:
    return [
        Bucket(key=key, runs=len(runs), measured=m.totals(), estimated=e.totals())
        for key, (m, e, runs) in sorted(table.items())
    ]


def _by_total(table: dict[str, _Acc]) -> list[tuple[str, _Acc]]:
    return sorted(table.items(), key=lambda item: (-item[1].total, natural_key(item[0])))


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """`codex#2` before `codex#10`: digit runs compare as numbers."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in _DIGITS.split(text) if part)


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _add_costs(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)


def half_up(value: float) -> int:
    """Round half up (Python's `round` is banker's: 2.5 → 2)."""
    return math.floor(value + 0.5)


def _ratio(value: int, divisor: int) -> int:
    return half_up(value / divisor) if divisor else 0


def _cost_ratio(cost: float | None, divisor: int) -> float | None:
    return round(cost / divisor, 6) if cost is not None and divisor else None


def _averages(
    report: CostReport,
    days: dict[str, tuple[_Acc, _Acc, set[str]]],
    hours: dict[str, tuple[_Acc, _Acc, set[str]]],
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


def _peak(table: dict[str, tuple[_Acc, _Acc, set[str]]]) -> str | None:
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


def _budgets(when: dict[_WhenKey, _Acc], stats: ScanStats, run_id: str | None) -> list[BudgetRow]:
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
