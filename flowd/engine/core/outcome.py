"""How a story's run ended, as the scheduler and the report see it (plain data, no rules)."""

from __future__ import annotations

from dataclasses import dataclass, field

from flowd.events.statuses import OutcomeStatus as OutcomeStatus


@dataclass
class StoryOutcome:
    id: str
    status: OutcomeStatus
    reason: str | None = None
    branch: str | None = None
    note: str | None = None
    executors: list[str] = field(default_factory=list)
    halt: str | None = None
    pause: str | None = None  # `paused`: why it waits on a person (engine/core/pause.py)
    pause_run: bool = False  # the whole run waits with it (the epic budget)
