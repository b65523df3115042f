"""The aggregated reader (`flowd.cost.aggregate`: usage lines summed by group, each group priced
once) gives the report of the per-sample fold (`build_report` over `scan`), on varied traces: priced,
tiered, time-priced, overridden and unpriced models, reported costs, estimates, days across DST
changes and half-hour zones, odd and torn lines, skipped files, budgets, bounds and run filters,
with blocks and group tables small enough to cut lines and flush groups mid-file."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from flowd.base import jsonl
from flowd.cost import aggregate
from flowd.cost.aggregate import Aggregator
from flowd.cost.fold import as_zone
from flowd.cost.prices import Prices, to_units
from flowd.cost.report import build_report, report_from_fold
from flowd.cost.samples import ScanStats, scan, trace_files
from flowd.store.config import PriceOverride
from flowd.trace.log import trace_path

from .traces import started, used, write_trace

PRICES = {
    "m": PriceOverride(input=1.0, output=2.0, cached_read=0.1),
    "cheap": PriceOverride(input=0.3, output=0.7),
}
MODELS = [
    "claude-sonnet-4-5",  # tiered above 200k input
    "claude-opus-4-1-20250805",
    "gemini-1.5-pro",  # tiered, no cache rates
    "deepseek-chat",  # prices that depend on the time
    "o3",
    "m",
    "cheap",
    "mystery",  # unpriced
    None,
    "",
]
# Times around Europe/Rome's fall-back night, and days later.
STARTS = ["2026-10-24T20:00", "2026-10-25T00:00", "2026-10-28T09:00", "2026-11-02T23:00"]

ODD_LINES = [
    b'{"v":1,"seq":9,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"TokensUsed"',  # torn
    b'not json at all, but it says "TokensUsed"',
    b'{"v":1,"at":"2026-10-25T01:30:00Z","event":{"type":"TokensUsed","agent":"c","usage":{"input":7}}}',
    b'{"v":1,"at":"2026-10-25T03:10:00.5+02:00","runId":"","event":{"type":"TokensUsed","agent":"c",'
    b'"model":"m","usage":{"input":9,"output":1}}}',  # offset time, run id from the directory
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","runId":"x","event":{"type":"TokensUsed","agent":"c",'
    b'"usage":{"input":5.9,"output":2,"cachedRead":null},"clone":true,"model":7,"estimated":"yes"}}',
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","event":{"type":"TokensUsed","agent":"c",'
    b'"usage":{"input":-5}}}',  # negative: skipped
    b'{"v":1,"at":"2026-10-25T01:61:00.000Z","runId":"y","event":{"type":"TokensUsed","agent":"c",'
    b'"usage":{"input":5}}}',  # a minute that is not one: not placed
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","runId":"y","event":{"type":"TokensUsed","agent":"c",'
    b'"model":"m","usage":{"input":99999999999999999999999,"output":1}}}',  # past 64 bits
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","runId":"y","event":{"type":"TokensUsed","agent":"c",'
    b'"model":"m","usage":{"input":5,"output":1,"costUsd":3}}}',  # an int cost
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","event":{"type":"ToolUse","args":{"TokensUsed":1}}}',
    b'{"v":1,"at":"2026-10-25T01:30:00.000Z","runId":"z","event":{"type":"RunStarted","epicId":'
    b'"TokensUsed","budgetUsd":5}}',  # a run start that reads as a usage line: skipped
]


def _event(rng: random.Random, n: int) -> tuple[str, object]:
    start = rng.choice(STARTS)
    minute = rng.randrange(0, 600)
    at = f"{start[:11]}{(int(start[11:13]) + minute // 60) % 24:02d}:{minute % 60:02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z"
    input_ = rng.choice([0, 1, 50, 4_000, 120_000, 200_000, 200_001, 450_000])
    cached = rng.choice([None, 0, input_ // 2, input_ + 10])  # more than input: the clamp
    written = rng.choice([None, 0, input_ // 5])
    return at, used(
        rng.choice(["coder", "reviewer", "planner"]),
        model=rng.choice(MODELS),
        input=input_,
        output=rng.randrange(0, 9_000),
        cached_read=cached,
        cache_write=written,
        cost=rng.choice([None] * 6 + [0.0125, 0.1, 2.5e-7]),
        lane=rng.choice([None, "", "s1", "s2", "s10"]),
        executor=rng.choice([None, "", "codex", "claude"]),
        clone=rng.choice([None, 0, 1, 2]),
        estimated=n % 7 == 0,
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("aggregate") / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    rng = random.Random(16)
    for r in range(6):
        events = [("2026-10-24T19:00:00.000Z", started(budget=[None, 0.5, 40.0][r % 3], epic=f"e{r}"))]
        events += [_event(rng, n) for n in range(400)]
        write_trace(repo, f"run-{r}", events, extra=tuple(ODD_LINES[r::2]))
    # A last line without its newline, and a directory where a trace belongs: a skipped file.
    with trace_path(repo, "run-5").open("ab") as handle:
        handle.write(jsonl.dumps({"v": 1, "at": "2026-10-25T02:00:00.000Z", "runId": "run-5",
                                   "event": {"type": "TokensUsed", "agent": "c", "usage": {"input": 3}}}))  # fmt: skip
    trace_path(repo, "run-9").mkdir(parents=True)
    return repo


def _both(
    repo: Path,
    tz: str,
    since: str | None = None,
    until: str | None = None,
    run_id: str | None = None,
) -> tuple[dict[str, object], dict[str, object]]:
    files = trace_files(repo, run_id)
    stats = ScanStats()
    prices = Prices(PRICES)
    expected = build_report(
        scan(files, stats, run_id), prices=prices, tz=tz, since=since, until=until, stats=stats, run_id=run_id
    )
    got_stats = ScanStats()
    aggregator = Aggregator(Prices(PRICES), as_zone(tz), since, until, run_id)
    aggregator.read(files, got_stats)
    got = report_from_fold(aggregator.fold(), tz=tz, stats=got_stats, run_id=run_id)
    return expected.wire(), got.wire()


@pytest.mark.parametrize(
    "tz", ["UTC", "Europe/Rome", "Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns"]
)
def test_aggregated_report_equals_the_per_sample_report(
    repo: Path, tz: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aggregate, "BLOCK", 4096)  # lines cut across blocks
    monkeypatch.setattr(aggregate, "GROUP_CAP", 50)  # groups priced and reopened mid-file
    monkeypatch.setattr(aggregate, "SLOT_CAP", 30)
    expected, got = _both(repo, tz)
    assert got == expected
    # The traces do hold what the test is about.
    skipped = expected["skipped"]
    assert isinstance(skipped, dict) and skipped["files"] == 1 and skipped["lines"] >= 5
    assert expected["budgets"] and expected["unpriced"]


@pytest.mark.parametrize(
    ("since", "until", "run_id"),
    [
        ("2026-10-25T00:30:00.000Z", "2026-10-28T10:15:30.500Z", None),
        ("2026-10-25T01:00:00.000Z", None, "run-2"),
        (None, "2026-10-25T02:00:00.000Z", None),
        (None, None, "run-4"),
    ],
)
def test_bounds_and_run_filter_match(
    repo: Path, since: str | None, until: str | None, run_id: str | None
) -> None:
    expected, got = _both(repo, "Europe/Rome", since, until, run_id)
    assert got == expected
    assert expected["requests"]


def test_group_prices_equal_the_sum_of_turn_prices() -> None:
    rng = random.Random(3)
    prices = Prices(PRICES)
    for model in MODELS:
        rates = prices.rates(model or None, "2026-10-25T01")
        if rates is None:
            continue
        exact = rates.exact()
        turns = []
        for _ in range(200):
            input_ = rng.randrange(0, int(min(exact.linear_limit, 10**7)) + 1)
            cached = rng.randrange(0, input_ + 1)
            turns.append((input_, rng.randrange(0, 10**5), cached, rng.randrange(0, input_ - cached + 1)))
        sums = [sum(column) for column in zip(*turns, strict=True)]
        assert exact.units_of_many(len(turns), *sums) == sum(exact.units(*turn) for turn in turns)
        for turn in turns[:20]:  # the integer rates price as the float ones do
            assert exact.units(*turn) == pytest.approx(to_units(rates.cost(*turn)), rel=1e-9, abs=2)
