"""The cost report's shape (docs/cost.md): the wire models of `flowd cost --json` and `flow/costReport`."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr

from flowd.base.wire import WireModel

SCHEMA_VERSION = 1


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
        return add_costs(self.measured.cost_usd, self.estimated.cost_usd)


def add_costs(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)
