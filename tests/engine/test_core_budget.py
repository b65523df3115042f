"""The budget rule as a table: limits and spending → what stops new work; no run, no events."""

from __future__ import annotations

import pytest

from flowd.engine.core.budget import BudgetLimits, BudgetSpent, budget_spent


@pytest.mark.parametrize(
    ("limits", "epic", "story", "expected"),
    [
        (BudgetLimits(), 100.0, 100.0, None),  # no limits
        (BudgetLimits(epic_usd=1.0), 0.99, None, None),
        (BudgetLimits(epic_usd=1.0), 1.0, None, BudgetSpent("epic", 1.0, 1.0)),  # reached at equality
        (BudgetLimits(epic_usd=1.0), 1.5, 0.0, BudgetSpent("epic", 1.0, 1.5)),
        (BudgetLimits(story_usd=0.5), 9.0, None, None),  # the scheduler asks for no story
        (BudgetLimits(story_usd=0.5), 9.0, 0.49, None),
        (BudgetLimits(story_usd=0.5), 9.0, 0.5, BudgetSpent("story", 0.5, 0.5)),
        # both spent: the epic's limit is the one reported
        (BudgetLimits(epic_usd=1.0, story_usd=0.5), 2.0, 0.7, BudgetSpent("epic", 1.0, 2.0)),
        (BudgetLimits(epic_usd=1.0, story_usd=0.5), 0.8, 0.7, BudgetSpent("story", 0.5, 0.7)),
        (
            BudgetLimits(epic_usd=0.0),
            0.0,
            None,
            BudgetSpent("epic", 0.0, 0.0),
        ),  # a zero budget starts nothing
    ],
)
def test_budget_spent(
    limits: BudgetLimits, epic: float, story: float | None, expected: BudgetSpent | None
) -> None:
    assert budget_spent(limits, epic, story) == expected


@pytest.mark.parametrize(
    ("spent", "reason"),
    [
        (BudgetSpent("epic", 1.0, 1.234), "the epic budget of $1.00 is spent ($1.23)"),
        (BudgetSpent("story", 0.5, 0.5), "the story budget of $0.50 is spent ($0.50)"),
    ],
)
def test_the_reason_reads_as_the_run_reports_it(spent: BudgetSpent, reason: str) -> None:
    assert spent.reason == reason
