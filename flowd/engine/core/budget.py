"""The budget rule: when no new story or task may start because money is spent.

The rule only answers; whoever acts on it reports `BudgetExceeded` (once per scope, see
`RunContext.budget_stop`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class BudgetLimits:
    epic_usd: float | None = None
    story_usd: float | None = None


@dataclass(frozen=True)
class BudgetSpent:
    """A limit reached: which scope, the limit, what was spent, and the sentence saying so."""

    scope: Literal["epic", "story"]
    limit_usd: float
    spent_usd: float

    @property
    def reason(self) -> str:
        return f"the {self.scope} budget of ${self.limit_usd:.2f} is spent (${self.spent_usd:.2f})"


def budget_spent(
    limits: BudgetLimits, epic_spent: float, story_spent: float | None = None
) -> BudgetSpent | None:
    """The limit that stops new work now (the epic's first), or None to go on.

    `story_spent` is None when no story is asking (the scheduler launching a story): then only the
    epic budget counts. A limit is reached when the spending equals it.
    """
    if limits.epic_usd is not None and epic_spent >= limits.epic_usd:
        return BudgetSpent("epic", limits.epic_usd, epic_spent)
    if story_spent is not None and limits.story_usd is not None and story_spent >= limits.story_usd:
        return BudgetSpent("story", limits.story_usd, story_spent)
    return None
