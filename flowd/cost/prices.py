"""Prices: USD for a turn's tokens, from the `genai-prices` package data and config overrides.

Only the data bundled with the installed package is read: flowd never starts the package's
`UpdatePrices` fetcher, so pricing touches no network. A model's rates are resolved once and cached
as floats, and each turn is priced with plain arithmetic that mirrors the package's rules (so 1M
samples price in well under a second, and tests check the result against `calc_price`):

- `input` counts every input token; cache reads and cache writes are priced at their own rates when
  the model has them, and otherwise at the plain input rate (they stay in the input bucket);
- tiered prices are "cliff" tiers chosen by the turn's total input tokens;
- a cost the agent reported wins; a model with no price is unpriced (None), never $0.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowd.store.config import PriceOverride, Settings

if TYPE_CHECKING:
    from flowd.cost.samples import Sample
    from flowd.trace.usage import Pricer, UsageLike

log = logging.getLogger(__name__)

_PER = 1_000_000.0
# A price per key: the base rate and its tiers as (start, rate), highest start first.
Rate = tuple[float, tuple[tuple[int, float], ...]]


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens; None: that kind of token is priced at the input rate."""

    input: Rate
    output: Rate
    cached_read: Rate | None = None
    cache_write: Rate | None = None
    per_request: float = 0.0  # USD per request
    source: str = "price data"  # or "config" for an override

    def cost(self, input_: int, output: int, cached_read: int, cache_write: int) -> float:
        # Runs once per priced turn of every fold and report: a flat rate, or a turn below a
        # tiered rate's lowest tier (its last start), is read in place; `_at` is called only
        # past it (the same arithmetic either way).
        uncached = input_
        total = 0.0
        rate = self.cached_read
        if rate is not None:
            uncached -= cached_read
            total += (_at(rate, input_) if rate[1] and input_ > rate[1][-1][0] else rate[0]) * cached_read
        rate = self.cache_write
        if rate is not None:
            uncached -= cache_write
            total += (_at(rate, input_) if rate[1] and input_ > rate[1][-1][0] else rate[0]) * cache_write
        rate, out = self.input, self.output
        # A misreport (more cached than input) must not make the rest cost less than nothing.
        total += (_at(rate, input_) if rate[1] and input_ > rate[1][-1][0] else rate[0]) * max(
            0, uncached
        ) + (_at(out, input_) if out[1] and input_ > out[1][-1][0] else out[0]) * output
        return total / _PER + self.per_request

    def exact(self) -> ExactRates:
        """These rates in integers, for the cost report's exact sums."""
        return _exact(self)


# The cost report sums costs as integers of 1e-15 USD (rates as integers of 1e-9 USD per million
# tokens), so a sum does not depend on the order or grouping of its terms: the report summed turn
# by turn, by group, or in several processes is the same (docs/performance.md: cost).
UNITS_PER_USD = 10**15
_UNITS_PER_MTOK_RATE = 10**9
IntRate = tuple[int, tuple[tuple[int, int], ...]]


def to_units(usd: float) -> int:
    return round(usd * UNITS_PER_USD)


def usd_of(units: int) -> float:
    """A sum in USD rounded half up to 6 decimals (the report's precision)."""
    return ((units + UNITS_PER_USD // 2_000_000) // (UNITS_PER_USD // 1_000_000)) / 1_000_000


@dataclass(frozen=True, slots=True)
class ExactRates:
    """`Rates` in integers: `units` is `Rates.cost` in 1e-15 USD."""

    input: IntRate
    output: IntRate
    cached_read: IntRate | None
    cache_write: IntRate | None
    per_request: int
    linear_limit: int | float  # the largest input priced at the base rates (no tier below it)

    def units(self, input_: int, output: int, cached_read: int, cache_write: int) -> int:
        uncached = input_
        total = 0
        rate = self.cached_read
        if rate is not None:
            uncached -= cached_read
            total += _int_at(rate, input_) * cached_read
        rate = self.cache_write
        if rate is not None:
            uncached -= cache_write
            total += _int_at(rate, input_) * cache_write
        total += _int_at(self.input, input_) * max(0, uncached) + _int_at(self.output, input_) * output
        return total + self.per_request

    def units_of_many(self, turns: int, input_: int, output: int, cached_read: int, cache_write: int) -> int:
        """The sum of `units` over `turns` turns, from their summed tokens: equal for turns whose
        input is within `linear_limit` and covers their cache counts (the cost is linear there)."""
        uncached = input_
        total = 0
        if self.cached_read is not None:
            uncached -= cached_read
            total += self.cached_read[0] * cached_read
        if self.cache_write is not None:
            uncached -= cache_write
            total += self.cache_write[0] * cache_write
        total += self.input[0] * uncached + self.output[0] * output
        return total + self.per_request * turns


def _int_rate(rate: Rate) -> IntRate:
    scale = _UNITS_PER_MTOK_RATE
    return (round(rate[0] * scale), tuple((start, round(price * scale)) for start, price in rate[1]))


def _int_at(rate: IntRate, total_input: int) -> int:
    for start, price in rate[1]:
        if total_input > start:
            return price
    return rate[0]


@cache
def _exact(rates: Rates) -> ExactRates:
    # Cliff tiers apply once the input passes their start: below the lowest start, every rate is
    # its base rate.
    starts = [
        rate[1][-1][0]
        for rate in (rates.input, rates.output, rates.cached_read, rates.cache_write)
        if rate is not None and rate[1]
    ]
    return ExactRates(
        input=_int_rate(rates.input),
        output=_int_rate(rates.output),
        cached_read=_int_rate(rates.cached_read) if rates.cached_read is not None else None,
        cache_write=_int_rate(rates.cache_write) if rates.cache_write is not None else None,
        per_request=to_units(rates.per_request),
        linear_limit=min(starts) if starts else math.inf,
    )


def _at(rate: Rate, total_input: int) -> float:
    # Cliff tiers: once the turn's input passes a tier's start, that tier's rate applies to all.
    for start, price in rate[1]:
        if total_input > start:
            return price
    return rate[0]


def _flat(value: float) -> Rate:
    return (float(value), ())


def _rate(value: Any) -> Rate | None:
    if value is None:
        return None
    if isinstance(value, Decimal | int | float):
        return (float(value), ())
    base, tiers = getattr(value, "base", None), getattr(value, "tiers", None)
    if base is None or tiers is None:
        return None
    ordered = sorted(((int(t.start), float(t.price)) for t in tiers), reverse=True)
    return (float(base), tuple(ordered))


def _rates_from_model_price(model_price: Any) -> Rates | None:
    """Our rates from a package `ModelPrice`; None when it prices no text tokens at all."""
    data = model_price.__dict__
    input_ = _rate(data.get("input_mtok"))
    output = _rate(data.get("output_mtok"))
    if input_ is None and output is None:
        return None
    requests = data.get("requests_kcount")
    return Rates(
        input=input_ or _flat(0),
        output=output or _flat(0),
        cached_read=_rate(data.get("cache_read_mtok")),
        cache_write=_rate(data.get("cache_write_mtok")),
        per_request=float(requests) / 1000 if requests is not None else 0.0,
    )


def _override_rates(override: PriceOverride) -> Rates:
    return Rates(
        input=_flat(override.input),
        output=_flat(override.output),
        cached_read=_flat(override.cached_read) if override.cached_read is not None else None,
        cache_write=_flat(override.cache_write) if override.cache_write is not None else None,
        source="config",
    )


def _candidates(model: str) -> list[tuple[str | None, str]]:
    """(provider, model) spellings to try: as given, then with each `provider/` or `provider:` prefix
    taken as the provider, then without it (`openrouter/anthropic/claude-x` → … → `claude-x`)."""
    out: list[tuple[str | None, str]] = [(None, model)]
    rest = model
    while True:
        cut = min((i for i in (rest.find("/"), rest.find(":")) if i > 0), default=-1)
        if cut < 0:
            return out
        prefix, rest = rest[:cut], rest[cut + 1 :]
        if not rest:
            return out
        out += [(prefix, rest), (None, rest)]


def _bare(model: str) -> str:
    return _candidates(model)[-1][1]


@cache
def _snapshot() -> Any:
    # The bundled data only: `get_snapshot()` would return a fetched one if anything had started
    # the package's updater in this process, and we want the same figures offline every time.
    from genai_prices import data_snapshot

    return data_snapshot._bundled_snapshot()


class Prices:
    """Prices turns by model: config overrides first, then the package data; cached per model."""

    def __init__(self, overrides: Mapping[str, PriceOverride] | None = None) -> None:
        self._overrides = {name.lower(): _override_rates(o) for name, o in (overrides or {}).items()}
        self._static: dict[str, Rates | None] = {}
        self._dynamic: dict[str, Any] = {}  # model → package ModelInfo whose price depends on the time
        self._timed: dict[tuple[str, str], Rates | None] = {}

    @classmethod
    def from_settings(cls, settings: Settings | None) -> Prices:
        return cls(settings.prices if settings is not None else None)

    # -- lookups ---------------------------------------------------------------------------------
    def rates(self, model: str | None, at: str | None = None) -> Rates | None:
        """The rates for a model at a time (ISO; None: now), or None when nobody prices it."""
        if model is None:
            return None
        try:
            return self._static[model]
        except KeyError:
            pass
        if model in self._dynamic:
            hour = (at or _now_iso())[:13]
            key = (model, hour)
            if key not in self._timed:
                self._timed[key] = _rates_from_model_price(self._dynamic[model].get_prices(_hour_start(hour)))
            return self._timed[key]
        return self._resolve(model, at)

    def _resolve(self, model: str, at: str | None) -> Rates | None:
        lowered = model.lower()
        found = self._overrides.get(lowered) or self._overrides.get(_bare(lowered))
        if found is not None:
            self._static[model] = found
            return found
        info = _find_model(lowered)
        if info is None:
            self._static[model] = None
            return None
        if isinstance(info.prices, list) and len(info.prices) > 1:
            self._dynamic[model] = info
            return self.rates(model, at)
        prices = info.prices[0].prices if isinstance(info.prices, list) else info.prices
        rates = _rates_from_model_price(prices) if prices is not None else None
        self._static[model] = rates
        return rates

    def resolved(self) -> Mapping[str, Rates | None]:
        """The models resolved so far whose rates do not depend on the time (a live view: it grows
        as `rates` resolves more). A caller pricing many samples reads it first and falls back to
        `price` for a model not in it."""
        return self._static

    def known(self, model: str | None) -> bool:
        return self.rates(model) is not None

    # -- pricing ---------------------------------------------------------------------------------
    def cost(
        self,
        model: str | None,
        input_: int,
        output: int,
        cached_read: int = 0,
        cache_write: int = 0,
        at: str | None = None,
    ) -> float | None:
        """USD from the price data (the reported cost is not considered here)."""
        rates = self._static.get(model) if model is not None else None
        if rates is None:
            rates = self.rates(model, at)
            if rates is None:
                return None
        return rates.cost(input_, output, cached_read, cache_write)

    def price(self, sample: Sample) -> float | None:
        """A sample's cost: the reported one, else the price data's, else None (unpriced)."""
        if sample.cost_usd is not None:
            return sample.cost_usd
        return self.cost(
            sample.model, sample.input, sample.output, sample.cached_read, sample.cache_write, sample.at
        )

    def price_usage(self, model: str | None, usage: UsageLike, at: str | None = None) -> float | None:
        if usage.cost_usd is not None:
            return usage.cost_usd
        return self.cost(model, usage.input, usage.output, usage.cached_read or 0, usage.cache_write or 0, at)

    def pricer(self) -> Pricer:
        """The fold's pricer (flowd.trace.view): reported cost wins, then these prices."""

        static = self._static

        def priced(model: str | None, usage: UsageLike) -> float | None:
            # Once per TokensUsed line of every fold: the cached common case without the detours.
            if usage.cost_usd is not None:
                return usage.cost_usd
            rates = static.get(model) if model is not None else None
            if rates is None:
                return self.price_usage(model, usage)
            return rates.cost(usage.input, usage.output, usage.cached_read or 0, usage.cache_write or 0)

        from flowd.trace.checkpoint import with_pricing_key  # not needed by `flowd cost`'s reader

        return with_pricing_key(priced, self.pricing_key())

    def pricing_key(self) -> str:
        """What this pricer's figures depend on: the package data and the overrides (a view
        checkpoint folded with other prices is not used, flowd/trace/checkpoint.py)."""
        overrides = hashlib.sha256(repr(sorted(self._overrides.items())).encode()).hexdigest()[:16]
        return f"genai-prices {_data_identity()}; overrides {overrides}"


@cache
def _data_identity() -> str:
    # The bundled data file's size and time, found without importing the package (0.3-0.6 s).
    try:
        spec = importlib.util.find_spec("genai_prices")
        if spec is None or spec.origin is None:
            return "missing"
        stat = os.stat(os.path.join(os.path.dirname(spec.origin), "data.py"))
    except (ImportError, OSError, ValueError):
        return "unknown"
    return f"{stat.st_size}-{stat.st_mtime_ns}"


def _find_model(model: str) -> Any:
    snapshot = _snapshot()
    for provider_id, ref in _candidates(model):
        try:
            return snapshot.find_provider_model(ref, None, provider_id, None)[1]
        except LookupError:
            continue
        except Exception as exc:  # odd package data must not break a report
            log.warning("cost: price lookup for %r failed: %s", model, exc)
            return None
    return None


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H")


def _hour_start(hour: str) -> datetime:
    try:
        return datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    except ValueError:
        return datetime.now(UTC)


def pricer(settings: Settings | None = None) -> Pricer:
    """The fold's pricer over the package data and the settings' `[prices.<model>]` overrides."""
    return Prices.from_settings(settings).pricer()


def pricer_at(root: Path) -> Pricer:
    """The pricer of the repository at `root` (its settings' overrides); the agents' own reported
    costs when its settings cannot be read: a broken config must not stop a server (docs/cost.md)."""
    from flowd.store.config import load_settings
    from flowd.trace.usage import reported_cost

    try:
        return pricer(load_settings(root))
    except Exception as exc:
        log.warning("prices: %s; showing only costs the agents report", exc)
        return reported_cost


@cache
def prices_as_of() -> str:
    """`pricesAsOf`: the price data's package and version (the data ships with it)."""
    try:
        return f"genai-prices {version('genai-prices')}"
    except PackageNotFoundError:
        return "genai-prices (unknown version)"
