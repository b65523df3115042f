from __future__ import annotations

from datetime import UTC, datetime

import genai_prices
import pytest

from flowd.cost.prices import Prices, pricer, prices_as_of
from flowd.cost.samples import Sample
from flowd.events.model import Usage
from flowd.store.config import PriceOverride, Settings
from flowd.trace.view import fold

AT = "2026-10-25T10:00:00.000Z"


def package_price(model: str, input_: int, output: int, cached: int, written: int) -> float:
    usage = genai_prices.Usage(
        input_tokens=input_, output_tokens=output, cache_read_tokens=cached, cache_write_tokens=written
    )
    when = datetime(2026, 10, 25, 10, tzinfo=UTC)
    return float(genai_prices.calc_price(usage, model, genai_request_timestamp=when).total_price)


@pytest.mark.parametrize(
    ("model", "counts"),
    [
        ("claude-sonnet-4-5", (3000, 2000, 1000, 500)),
        ("claude-sonnet-4-5", (300_000, 2000, 100_000, 5000)),  # past the 200k tier
        ("gpt-5", (10_000, 500, 4000, 0)),
        ("gemini-2.5-pro", (250_000, 100, 0, 0)),
        ("claude-opus-4-1", (1000, 100, 0, 0)),
        ("o3", (1000, 1000, 100, 0)),
    ],
)
def test_fast_prices_agree_with_the_package(model: str, counts: tuple[int, int, int, int]) -> None:
    assert Prices().cost(model, *counts, at=AT) == pytest.approx(package_price(model, *counts), rel=1e-12)


def test_provider_prefixes_and_dated_names_match() -> None:
    prices = Prices()
    plain = prices.cost("claude-sonnet-4-5", 1000, 100)
    assert plain is not None and plain > 0
    for spelling in (
        "anthropic/claude-sonnet-4-5",
        "anthropic:claude-sonnet-4-5",
        "Claude-Sonnet-4-5-20250929",
    ):
        assert prices.cost(spelling, 1000, 100) == pytest.approx(plain)
    assert prices.cost("openrouter/anthropic/claude-sonnet-4-5", 1000, 100) is not None


def test_unknown_model_is_unpriced_never_zero() -> None:
    prices = Prices()
    assert prices.cost("scripted", 1000, 100) is None
    assert prices.cost(None, 1000, 100) is None
    assert prices.rates("no-such-model-anywhere") is None


def test_reported_cost_wins_over_price_data() -> None:
    prices = Prices()
    sample = Sample(run_id="r", at=AT, agent="coder", model="claude-sonnet-4-5", input=10, output=10)
    assert prices.price(sample) == pytest.approx(prices.cost("claude-sonnet-4-5", 10, 10) or -1)
    sample.cost_usd = 0.5
    assert prices.price(sample) == 0.5
    # Even a model nobody prices is priced by its reported cost.
    assert prices.price(Sample(run_id="r", at=AT, agent="coder", model="scripted", cost_usd=0.0)) == 0.0


def test_config_overrides_replace_and_extend_the_data() -> None:
    settings = Settings(
        prices={
            "my-local-model": PriceOverride(input=1.0, output=2.0),
            "gpt-5": PriceOverride(input=10.0, output=20.0, cached_read=1.0, cache_write=5.0),
        }
    )
    prices = Prices.from_settings(settings)
    assert prices.cost("my-local-model", 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert prices.cost("local/my-local-model", 1_000_000, 0) == pytest.approx(1.0)
    # input counts cache reads and writes: 1M in of which 0.5M read, 0.25M written.
    assert prices.cost("gpt-5", 1_000_000, 0, 500_000, 250_000) == pytest.approx(2.5 + 0.5 + 1.25)
    zero = Prices({"free": PriceOverride(input=0, output=0)})
    assert zero.cost("free", 10, 10) == 0.0  # an explicit $0 price is a price


def test_cache_tokens_fall_back_to_the_input_rate_when_unpriced() -> None:
    prices = Prices({"m": PriceOverride(input=2.0, output=0)})
    assert prices.cost("m", 1_000_000, 0, 600_000, 100_000) == pytest.approx(2.0)


def test_pricer_serves_the_fold() -> None:
    from flowd.events.model import Envelope, TokensUsed

    price = pricer(Settings(prices={"m": PriceOverride(input=1.0, output=1.0)}))
    assert price("m", Usage(input=500_000, output=500_000)) == pytest.approx(1.0)
    assert price("m", Usage(input=1, output=1, cost_usd=7.0)) == 7.0
    assert price("unknown-thing", Usage(input=1, output=1)) is None
    events = [
        Envelope(
            seq=1, at=AT, run_id="r", event=TokensUsed(agent="coder", model="m", usage=Usage(input=10**6))
        ),
        Envelope(seq=2, at=AT, run_id="r", event=TokensUsed(agent="coder", model="x?", usage=Usage(input=5))),
    ]
    view = fold("r", events, price)
    assert view.totals.cost_usd == pytest.approx(1.0)
    assert view.totals.unpriced_tokens == 5


def test_prices_as_of_names_the_data() -> None:
    assert prices_as_of().startswith("genai-prices ")


def test_only_the_bundled_data_is_used() -> None:
    # Anything in the process may install a fetched snapshot (the package's updater does); the
    # report must keep using the data that shipped with the package, offline and repeatable.
    from genai_prices import data_snapshot

    bundled = Prices().cost("gpt-5", 1000, 1000)
    data_snapshot.set_custom_snapshot(data_snapshot.DataSnapshot(providers=[], from_auto_update=True))
    try:
        assert Prices().cost("gpt-5", 1000, 1000) == bundled
    finally:
        data_snapshot.set_custom_snapshot(None)
