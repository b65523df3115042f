"""Live budget tracking for the engine: how much the epic and each story have spent.

Pure: the engine feeds it every `TokensUsed` (directly, or by subscribing `observe` to the trace
writer, or by replaying a resumed run's trace with `feed`) and asks `check(lane)` before it starts
a task or a story. Once a limit is reached (spent >= limit, contract §2.3: "no new task or story
starts once spent") `check` returns what the engine needs to emit `BudgetExceeded` and halt.
Unpriced usage counts as $0 here (it cannot be priced) and is tallied apart so it can be reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from flowd.cost.prices import Prices
from flowd.cost.samples import Sample
from flowd.events import BudgetExceeded, Envelope, TokensUsed, Usage
from flowd.view import Pricer


@dataclass(frozen=True)
class BudgetCheck:
    """A limit that is reached: what `BudgetExceeded` says."""

    scope: Literal["epic", "story"]
    limit_usd: float
    spent_usd: float
    lane: str | None = None

    def event(self) -> BudgetExceeded:
        return BudgetExceeded(
            scope=self.scope, lane=self.lane, limit_usd=self.limit_usd, spent_usd=round(self.spent_usd, 6)
        )


class BudgetTracker:
    """Spend of one run: the epic total and per lane (story). Thread-compatible, not thread-safe."""

    def __init__(
        self,
        *,
        budget_usd: float | None = None,
        story_budget_usd: float | None = None,
        prices: Prices | None = None,
        pricer: Pricer | None = None,
    ) -> None:
        self.budget_usd = budget_usd
        self.story_budget_usd = story_budget_usd
        self._pricer: Pricer = pricer or (prices or Prices()).pricer()
        self._epic = 0.0
        self._stories: dict[str, float] = {}
        self.requests = 0
        self.tokens = 0
        self.unpriced_requests = 0
        self.unpriced_tokens = 0
        self._seen: set[int] = set()

    # -- feeding ----------------------------------------------------------------------------------
    def add(self, event: TokensUsed) -> float | None:
        """Count one turn; returns its cost (None when unpriced)."""
        cost = self._pricer(event.model, event.usage)
        tokens = event.usage.input + event.usage.output
        self._count(event.lane, cost, tokens)
        return cost

    def add_sample(self, sample: Sample) -> float | None:
        usage = Usage(
            input=sample.input,
            output=sample.output,
            total=sample.total,
            cached_read=sample.cached_read,
            cache_write=sample.cache_write,
            cost_usd=sample.cost_usd,
        )
        cost = self._pricer(sample.model, usage)
        self._count(sample.lane, cost, sample.total)
        return cost

    def observe(self, envelope: Envelope) -> None:
        """A trace-writer subscriber; counts each envelope's seq once (safe with `feed` on resume)."""
        if isinstance(envelope.event, TokensUsed) and envelope.seq not in self._seen:
            self._seen.add(envelope.seq)
            self.add(envelope.event)

    def feed(self, envelopes: Iterable[Envelope]) -> None:
        """Replay a run's trace (a resumed run keeps what it already spent)."""
        for envelope in envelopes:
            self.observe(envelope)

    def _count(self, lane: str | None, cost: float | None, tokens: int) -> None:
        self.requests += 1
        self.tokens += tokens
        if cost is None:
            self.unpriced_requests += 1
            self.unpriced_tokens += tokens
            return
        self._epic += cost
        if lane is not None:
            self._stories[lane] = self._stories.get(lane, 0.0) + cost

    # -- asking ------------------------------------------------------------------------------------
    @property
    def epic_spent(self) -> float:
        return self._epic

    def story_spent(self, lane: str) -> float:
        return self._stories.get(lane, 0.0)

    def check(self, lane: str | None = None) -> BudgetCheck | None:
        """The limit that forbids starting work now (the epic's first, then the lane's), or None."""
        if self.budget_usd is not None and self._epic >= self.budget_usd:
            return BudgetCheck("epic", self.budget_usd, self._epic)
        if lane is not None and self.story_budget_usd is not None:
            spent = self.story_spent(lane)
            if spent >= self.story_budget_usd:
                return BudgetCheck("story", self.story_budget_usd, spent, lane)
        return None

    def may_start(self, lane: str | None = None) -> bool:
        """May a new task (of `lane`) or a new story start?"""
        return self.check(lane) is None

    def may_start_task(self, lane: str) -> bool:
        return self.check(lane) is None

    def may_start_story(self, lane: str) -> bool:
        return self.check(lane) is None

    def remaining(self, lane: str | None = None) -> float | None:
        """USD left before the tightest applicable limit (None: no limit applies)."""
        left: list[float] = []
        if self.budget_usd is not None:
            left.append(self.budget_usd - self._epic)
        if lane is not None and self.story_budget_usd is not None:
            left.append(self.story_budget_usd - self.story_spent(lane))
        return max(0.0, min(left)) if left else None
