"""Exclusions in a running pool (the policy and the file are `state.py`'s): each executor's
exclusion recorded, readmitted or expired, saved to `.flow/roster-state.json` and signalled to
waiting leases; one loop timer at the next exclusion's end wakes them without polling.

All of it is synchronous and runs on the event loop, like the pool's bookkeeping."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from flowd.agents.base import AgentError
from flowd.base.timeutil import iso
from flowd.events.model import Event, ExecutorExcluded, ExecutorResumed
from flowd.roster.leasing import ExecutorState
from flowd.roster.state import Exclusion, ExclusionPolicy, Health, decide, load_exclusions, save_exclusions


class ExclusionBook:
    """The exclusions of the pool's executors (`states`, shared with the pool) over time."""

    def __init__(
        self,
        states: dict[str, ExecutorState],
        *,
        state_path: Path,
        emit: Callable[[Event], None],
        clock: Callable[[], datetime],
        policy: ExclusionPolicy,
    ) -> None:
        self._states = states
        self._state_path = state_path
        self._emit = emit
        self._clock = clock
        self._policy = policy
        self._changed = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: datetime | None = None
        for ident, exclusion in load_exclusions(state_path, set(states), clock()).items():
            states[ident].exclusion = exclusion

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change (a release, an exclusion's start or end); take it before waiting."""
        return self._changed

    def record(self, state: ExecutorState, error: AgentError) -> None:
        """A failed call on `state`'s executor: excluded when the policy says so."""
        now = self._clock()
        exclusion = decide(
            state.spec.id, error.kind, error.message, error.reset_at, now, state.health, self._policy
        )
        if exclusion is not None:
            self.exclude(state, exclusion)

    def exclude(self, state: ExecutorState, exclusion: Exclusion) -> None:
        state.exclusion = exclusion
        until = iso(exclusion.until) if exclusion.until is not None else None
        self._emit(ExecutorExcluded(executor=state.spec.id, reason=exclusion.describe(), until=until))
        self._save()
        self.arm_timer()
        self.signal()

    def readmit(self) -> list[str]:
        """Take back every executor excluded for the run (an answer `wait` to a `noExecutor`
        pause: the person fixed what was wrong, docs/answers.md); their ids."""
        back = [s for s in self._states.values() if s.exclusion is not None and s.exclusion.kind == "run"]
        for state in back:
            state.exclusion = None
            state.health = Health()
            self._emit(ExecutorResumed(executor=state.spec.id, reason="taken back by an answer (wait)"))
        if back:
            self._save()
            self.signal()
        return [s.spec.id for s in back]

    def expire(self) -> None:
        now = self._clock()
        expired = [
            s
            for s in self._states.values()
            if s.exclusion is not None and s.exclusion.until is not None and s.exclusion.until <= now
        ]
        for state in expired:
            assert state.exclusion is not None
            reason = "back-off over, trying it again" if state.exclusion.kind == "backoff" else "expired"
            until = iso(state.exclusion.until) if state.exclusion.until else None
            state.exclusion = None
            self._emit(ExecutorResumed(executor=state.spec.id, reason=reason, until=until))
        if expired:
            self._save()
            self.signal()

    def _save(self) -> None:
        current = {s.spec.id: s.exclusion for s in self._states.values() if s.exclusion is not None}
        try:
            save_exclusions(self._state_path, set(self._states), current, self._clock())
        except OSError as exc:  # advisory state: a run goes on without it
            print(f"flowd: could not save {self._state_path}: {exc}", file=sys.stderr)

    def signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def arm_timer(self) -> None:
        """One loop timer at the next exclusion end, so waiting leases wake without polling."""
        ends = [
            s.exclusion.until
            for s in self._states.values()
            if s.exclusion is not None and s.exclusion.until is not None
        ]
        soonest = min(ends, default=None)
        if soonest == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = soonest
        if soonest is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # armed by the first lease
        delay = max(0.0, (soonest - self._clock()).total_seconds())
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.expire()
        self.arm_timer()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
