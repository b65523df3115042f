"""The streaming fold of usage samples that every cost report is rolled up from (docs/cost.md).

Samples are aggregated as they arrive into two small tables of accumulators, one keyed by
(run, local hour, model, estimated) and one by (agent, executor, clone, story), so memory grows
with the variety of the usage, never with its volume. Buckets are local hours of the report's IANA
zone (zoneinfo, so DST is right: the repeated hour of a fall-back night is one `HH:00` bucket
holding both).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from flowd.cost.model import Totals
from flowd.cost.prices import Prices, to_units, usd_of
from flowd.cost.samples import Sample


# -- aggregation ------------------------------------------------------------------------------------
class Acc:
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

    def merge(self, other: Acc) -> None:
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
WhenKey = tuple[str, str, str | None, bool]
WhoKey = tuple[str, str | None, int | None, str | None]


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

    when: dict[WhenKey, Acc] = field(default_factory=dict)
    who: dict[WhoKey, Acc] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None

    def merge(self, other: UsageFold) -> None:
        for table, theirs in ((self.when, other.when), (self.who, other.who)):
            for key, acc in theirs.items():
                merge_into(table, key, acc)
        if other.first is not None and (self.first is None or other.first < self.first):
            self.first = other.first
        if other.last is not None and (self.last is None or other.last > self.last):
            self.last = other.last


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
        self.when: dict[WhenKey, Acc] = {}
        self.who: dict[WhoKey, Acc] = {}
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
        self, when: WhenKey, who: WhoKey, counts: tuple[int, int, int, int, int], cost: int | None
    ) -> None:
        """Add `requests, input, output, cachedRead, cacheWrite` summed over turns that share both
        keys, and their summed cost in `UNITS_PER_USD` (None: unpriced)."""
        requests, input_, output, cached_read, cache_write = counts
        for acc in (row_of(self.when, when), row_of(self.who, who)):
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


def row_of(table: dict[Any, Acc], key: Any) -> Acc:
    row = table.get(key)
    if row is None:
        row = table[key] = Acc()
    return row


def merge_into(table: dict[Any, Acc], key: Any, acc: Acc) -> None:
    row_of(table, key).merge(acc)
