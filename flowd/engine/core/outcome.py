"""How a story's run ended, as the scheduler and the report see it (plain data, no rules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

OutcomeStatus = Literal["done", "failed", "waiting", "cancelled"]


@dataclass
class StoryOutcome:
    id: str
    status: OutcomeStatus
    reason: str | None = None
    branch: str | None = None
    note: str | None = None
    executors: list[str] = field(default_factory=list)
    halt: str | None = None
