from __future__ import annotations

import pytest

from flowd.config import PriceOverride
from flowd.cost.budget import BudgetTracker
from flowd.cost.prices import Prices
from flowd.cost.samples import Sample
from flowd.events import Envelope, TokensUsed, Usage

PRICES = Prices({"m": PriceOverride(input=1.0, output=1.0)})  # $1 per million tokens


def used(lane: str | None, tokens: int, *, cost: float | None = None, model: str = "m") -> TokensUsed:
    return TokensUsed(lane=lane, agent="coder", model=model, usage=Usage(input=tokens, cost_usd=cost))


def test_epic_and_story_spend() -> None:
    tracker = BudgetTracker(budget_usd=3.0, story_budget_usd=1.0, prices=PRICES)
    assert tracker.add(used("a", 500_000)) == pytest.approx(0.5)
    tracker.add(used("b", 0, cost=0.25))
    tracker.add(used(None, 100_000))  # a planner off any lane: the epic pays, no story does
    assert tracker.epic_spent == pytest.approx(0.85)
    assert tracker.story_spent("a") == pytest.approx(0.5)
    assert tracker.story_spent("b") == pytest.approx(0.25)
    assert tracker.may_start_task("a") and tracker.may_start_story("c")
    assert tracker.remaining("a") == pytest.approx(0.5)


def test_story_limit_stops_only_that_story() -> None:
    tracker = BudgetTracker(story_budget_usd=1.0, prices=PRICES)
    tracker.add(used("a", 1_000_000))
    check = tracker.check("a")
    assert check is not None and check.scope == "story" and check.lane == "a"
    assert check.event().wire() == {
        "type": "BudgetExceeded", "scope": "story", "lane": "a", "limitUsd": 1.0, "spentUsd": 1.0,
    }  # fmt: skip
    assert tracker.may_start_task("b")
    assert tracker.may_start()


def test_epic_limit_stops_everything_and_comes_first() -> None:
    tracker = BudgetTracker(budget_usd=1.0, story_budget_usd=0.5, prices=PRICES)
    tracker.add(used("a", 600_000))
    assert not tracker.may_start_task("a")
    assert tracker.may_start_task("b")
    tracker.add(used("b", 400_000))
    check = tracker.check("a")
    assert check is not None and check.scope == "epic" and check.lane is None
    assert check.spent_usd == pytest.approx(1.0)
    assert not tracker.may_start_story("c") and not tracker.may_start()


def test_unpriced_usage_is_counted_apart() -> None:
    tracker = BudgetTracker(budget_usd=1.0, prices=PRICES)
    assert tracker.add(used("a", 10_000_000, model="who-knows")) is None
    assert tracker.epic_spent == 0.0
    assert (tracker.unpriced_requests, tracker.unpriced_tokens) == (1, 10_000_000)
    assert tracker.may_start("a")


def test_replay_and_live_feed_count_each_line_once() -> None:
    tracker = BudgetTracker(budget_usd=10.0, prices=PRICES)
    lines = [
        Envelope(seq=n, at="2026-10-25T10:00:00.000Z", run_id="r", event=used("a", 1_000_000)) for n in (1, 2)
    ]
    tracker.feed(lines)
    tracker.observe(lines[1])  # the writer's subscriber sees the same line again
    assert tracker.epic_spent == pytest.approx(2.0)


def test_samples_feed_too() -> None:
    tracker = BudgetTracker(budget_usd=1.0, prices=PRICES)
    tracker.add_sample(Sample(run_id="r", at="", agent="coder", lane="a", model="m", input=2_000_000))
    assert tracker.story_spent("a") == pytest.approx(2.0)
    assert not tracker.may_start("a")
