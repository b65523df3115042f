"""A turn's usage as the fold reads it, and how the fold prices it: `UsageLike` (a trace event's
`Usage`, or the fast reader's `Tokens`), `Pricer` and the default `reported_cost`, which trusts
only the cost an agent reported (flowd/cost/prices.py prices the rest)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class UsageLike(Protocol):
    """A turn's usage as the fold reads it: `flowd.events.model.Usage`, or `Tokens` from the fast reader."""

    @property
    def input(self) -> int: ...
    @property
    def output(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def cached_read(self) -> int | None: ...
    @property
    def cache_write(self) -> int | None: ...
    @property
    def cost_usd(self) -> float | None: ...


@dataclass(slots=True)
class Tokens:
    """A turn's usage without a pydantic object: what the streaming trace reader builds per line."""

    input: int = 0
    output: int = 0
    total: int = 0
    cached_read: int | None = None
    cache_write: int | None = None
    cost_usd: float | None = None


# Prices a turn: (model, usage) → USD, or None when unknown. The default trusts only reported cost.
Pricer = Callable[[str | None, UsageLike], float | None]


def reported_cost(model: str | None, usage: UsageLike) -> float | None:
    return usage.cost_usd
