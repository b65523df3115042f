from __future__ import annotations

from pathlib import Path

import pytest

from flowd.cost.prices import Prices
from flowd.cost.report import build_report, half_up, natural_key
from flowd.cost.samples import Sample, ScanStats, scan, trace_files
from flowd.store.config import PriceOverride

from .traces import started, used, write_trace

# $1 per million input tokens, $2 per million output: easy known answers.
PRICES = Prices({"m": PriceOverride(input=1.0, output=2.0), "cheap": PriceOverride(input=0.5, output=0.5)})


def sample(at: str, **fields: object) -> Sample:
    base: dict[str, object] = {"run_id": "r1", "at": at, "agent": "coder", "model": "m"}
    base.update(fields)
    return Sample(**base)  # type: ignore[arg-type]


def test_measured_estimated_and_unpriced_stay_apart() -> None:
    at = "2026-10-20T10:00:00.000Z"
    report = build_report(
        [
            sample(at, input=1_000_000, output=500_000, cached_read=200_000),  # $1 + $1
            sample(at, input=2_000, output=1_000, estimated=True),  # estimated, priced
            sample(at, model="mystery", input=300, output=30),  # measured, unpriced
            sample(at, model=None, input=10, output=0, estimated=True),  # no model: unpriced
        ],
        prices=PRICES,
        tz="UTC",
    )
    wire = report.wire()
    assert wire["measured"] == {
        "requests": 2, "input": 1_000_300, "output": 500_030, "total": 1_500_330,
        "cachedRead": 200_000, "cacheWrite": 0, "costUsd": 2.0,
    }  # fmt: skip
    assert wire["estimated"]["requests"] == 2
    assert wire["estimated"]["total"] == 3_010
    assert wire["estimated"]["costUsd"] == pytest.approx(0.004)
    assert wire["unpriced"] == {"requests": 2, "tokens": 340, "models": ["(unknown)", "mystery"]}
    assert wire["requests"] == 4 and wire["runs"] == 1
    models = [(row["model"], row["estimated"], row["totals"]["costUsd"]) for row in wire["byModel"]]
    assert models == [
        ("m", False, 2.0),
        ("mystery", False, None),
        ("(unknown)", True, None),
        ("m", True, 0.004),
    ]


def test_only_unpriced_usage_has_null_cost_not_zero() -> None:
    report = build_report([sample("2026-10-20T10:00:00.000Z", model="mystery", input=5)], prices=PRICES)
    wire = report.wire()
    assert wire["measured"]["costUsd"] is None
    assert "costUsdPerRun" not in wire["averages"]
    assert wire["averages"]["tokensPerRun"] == 5


def test_reported_cost_wins_over_price_data() -> None:
    report = build_report(
        [sample("2026-10-20T10:00:00.000Z", input=1_000_000, cost_usd=0.25)], prices=PRICES, tz="UTC"
    )
    assert report.measured.cost_usd == 0.25
    report = build_report(
        [sample("2026-10-20T10:00:00.000Z", model="mystery", input=9, cost_usd=0.5)], prices=PRICES
    )
    assert report.measured.cost_usd == 0.5 and report.unpriced.requests == 0


def test_hour_buckets_across_the_fall_back_in_rome() -> None:
    # Europe/Rome leaves summer time at 2026-10-25T01:00Z: 03:00 CEST becomes 02:00 CET.
    times = [
        "2026-10-24T21:59:00.000Z",  # 23:59 CEST on the 24th
        "2026-10-24T23:30:00.000Z",  # 01:30 CEST
        "2026-10-25T00:30:00.000Z",  # 02:30 CEST
        "2026-10-25T01:30:00.000Z",  # 02:30 CET: the repeated hour, same bucket
        "2026-10-25T02:30:00.000Z",  # 03:30 CET
    ]
    report = build_report(
        [sample(at, input=100 * (n + 1)) for n, at in enumerate(times)], prices=PRICES, tz="Europe/Rome"
    )
    hours = {b.key: b.measured.total for b in report.by_hour}
    assert hours == {
        "2026-10-24 23:00": 100,
        "2026-10-25 01:00": 200,
        "2026-10-25 02:00": 300 + 400,
        "2026-10-25 03:00": 500,
    }
    assert [(b.key, b.measured.total) for b in report.by_day] == [("2026-10-24", 100), ("2026-10-25", 1400)]
    assert report.time_zone == "Europe/Rome"
    assert report.averages.calendar_days == 2 and report.averages.active_hours == 4
    assert report.averages.peak_hour == "2026-10-25 02:00"
    # The same samples in UTC: five distinct hours, two days split differently.
    utc = build_report([sample(at, input=100) for at in times], prices=PRICES, tz="UTC")
    assert utc.by_hour[0].key == "2026-10-24 21:00" and len(utc.by_hour) == 5
    assert [d.measured.requests for d in utc.by_day] == [2, 3]


def test_spring_forward_skips_an_hour_in_rome() -> None:
    # 2026-03-29T01:00Z: 02:00 CET jumps to 03:00 CEST.
    report = build_report(
        [sample("2026-03-29T00:30:00.000Z", input=1), sample("2026-03-29T01:30:00.000Z", input=1)],
        prices=PRICES,
        tz="Europe/Rome",
    )
    assert [b.key for b in report.by_hour] == ["2026-03-29 01:00", "2026-03-29 03:00"]


def test_by_executor_counts_clones_in_natural_order() -> None:
    at = "2026-10-20T10:00:00.000Z"
    samples = [
        sample(at, executor="codex", clone=10, input=100),
        sample(at, executor="codex", clone=2, input=300),
        sample(at, executor="claude", clone=1, input=50),
        sample(at, executor="codex", clone=2, input=100),
        sample(
            at, agent="reviewer", executor="gemini", input=50
        ),  # no clone: not a lane's coder, so not in byExecutor
        sample(at, agent="planner", input=400),  # no executor named: not in byExecutor
    ]
    report = build_report(samples, prices=PRICES)
    rows = [(r.executor, r.totals.requests, r.totals.total, r.share) for r in report.by_executor]
    assert rows == [
        ("claude#1", 1, 50, 0.05),
        ("codex#2", 2, 400, 0.4),
        ("codex#10", 1, 100, 0.1),
    ]
    assert sorted(["codex#10", "codex#2", "codex#1"], key=natural_key) == ["codex#1", "codex#2", "codex#10"]
    agents = [(r.agent, r.totals.total) for r in report.by_agent]
    assert agents == [("coder", 550), ("planner", 400), ("reviewer", 50)]


def test_by_story_and_shares() -> None:
    at = "2026-10-20T10:00:00.000Z"
    report = build_report(
        [
            sample(at, lane="api", input=300),
            sample(at, lane="ui", input=600),
            sample(at, lane="api", input=300),
            sample(at, input=200, agent="planner"),  # off any lane
        ],
        prices=PRICES,
    )
    assert [(r.story, r.totals.total, r.share) for r in report.by_story] == [
        ("api", 600, round(600 / 1400, 4)),
        ("ui", 600, round(600 / 1400, 4)),
    ]


def test_averages_projection_and_half_up_rounding() -> None:
    samples = [
        sample("2026-10-20T10:00:00.000Z", run_id="r1", input=1_000_000, output=1),
        sample("2026-10-20T11:00:00.000Z", run_id="r2", input=2_000_000, output=2),
        sample("2026-10-22T10:00:00.000Z", run_id="r2", input=3, output=0),
    ]
    report = build_report(samples, prices=PRICES, tz="UTC", runs_per_day=3)
    a = report.averages
    assert (a.active_days, a.calendar_days, a.active_hours) == (2, 3, 3)
    tokens = 3_000_006
    assert a.tokens_per_active_day == half_up(tokens / 2)
    assert a.tokens_per_calendar_day == tokens // 3
    assert a.tokens_per_run == tokens // 2
    assert a.tokens_per_request == tokens // 3
    assert a.cost_usd_per_run == pytest.approx(3.000009 / 2, abs=1e-6)
    assert a.peak_day == "2026-10-20" and a.peak_hour == "2026-10-20 11:00"
    assert report.projection is not None
    assert report.projection.tokens_per_day == half_up(tokens / 2 * 3)
    assert report.projection.tokens_per_month == half_up(tokens / 2 * 3 * 30)
    assert report.projection.cost_usd_per_day == pytest.approx(3.000009 / 2 * 3, abs=1e-6)
    assert build_report(samples, prices=PRICES).projection is None
    assert [b.runs for b in report.by_day] == [2, 1]
    assert (half_up(2.5), half_up(3.5), half_up(0.49)) == (3, 4, 0)


def test_peak_tie_goes_to_the_earliest_bucket() -> None:
    report = build_report(
        [sample("2026-10-21T10:00:00.000Z", input=5), sample("2026-10-20T10:00:00.000Z", input=5)],
        prices=PRICES,
        tz="UTC",
    )
    assert report.averages.peak_day == "2026-10-20"
    assert report.from_ == "2026-10-20T10:00:00.000Z" and report.to == "2026-10-21T10:00:00.000Z"


def test_since_and_until_bound_the_window() -> None:
    samples = [sample(f"2026-10-2{d}T10:00:00.000Z", input=d) for d in range(5)]
    report = build_report(
        samples, prices=PRICES, since="2026-10-21T10:00:00.000Z", until="2026-10-23T10:00:00.000Z"
    )
    assert report.requests == 2 and report.measured.input == 1 + 2


def test_empty_report_has_every_section() -> None:
    wire = build_report([], prices=PRICES, tz="Europe/Rome").wire()
    assert wire["schemaVersion"] == 1 and wire["timeZone"] == "Europe/Rome"
    assert wire["pricesAsOf"].startswith("genai-prices")
    assert "from" not in wire and "to" not in wire and "projection" not in wire
    assert wire["runs"] == 0 and wire["requests"] == 0
    assert wire["measured"]["costUsd"] is None
    for key in ("byDay", "byHour", "byModel", "byAgent", "byExecutor", "byStory"):
        assert wire[key] == []
    assert set(wire) >= {
        "schemaVersion", "timeZone", "pricesAsOf", "runs", "requests", "measured", "estimated",
        "unpriced", "averages", "byDay", "byHour", "byModel", "byAgent", "byExecutor", "byStory",
    }  # fmt: skip


def test_report_over_traces_with_budgets(tmp_path: Path) -> None:
    write_trace(
        tmp_path,
        "r1",
        [
            ("2026-10-20T10:00:00.000Z", started(budget=1.0)),
            ("2026-10-20T10:01:00.000Z", used(input=1_000_000, lane="a", executor="codex", clone=1)),
            ("2026-10-20T10:02:00.000Z", used(model="cheap", input=1_000_000, lane="a")),
        ],
    )
    write_trace(tmp_path, "r2", [("2026-10-21T10:00:00.000Z", used(input=10))])
    stats = ScanStats()
    report = build_report(scan(trace_files(tmp_path), stats), prices=PRICES, tz="UTC", stats=stats)
    assert report.runs == 2 and report.requests == 3
    assert [b.model_dump() for b in report.budgets] == [
        {
            "run_id": "r1",
            "epic_id": "auth",
            "budget_usd": 1.0,
            "spent_usd": 1.5,
            "remaining_usd": 0.0,
            "exceeded": True,
        }
    ]
    assert report.wire()["budgets"][0]["runId"] == "r1"
