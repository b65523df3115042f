"""Exclusions: the pure policy (failure → exclusion) and `.flow/roster-state.json`.

Only infrastructure signals exclude an executor (rate and usage limits, sign-in, an agent that
does not answer); the quality of its work never does. Exclusions with an end time outlive the run
in the state file; exclusions "for the run" and held clones live only in memory, so a killed run
leaves nothing held behind.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from flowd.agents.base import EXECUTOR_FAULTS, FailureKind
from flowd.base.fsio import write_model_atomic
from flowd.base.timeutil import iso, parse_iso
from flowd.base.wire import WireModel

ExclusionKind = Literal[
    "until",  # out until a known instant (a rate-limit cool-down, a usage limit's reset)
    "backoff",  # did not answer: tried again at `until`, each new failure doubles the wait
    "run",  # for the rest of this run (not signed in, unknown model); never persisted
]

STATE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ExclusionPolicy:
    """How long each kind of failure keeps an executor out (seconds)."""

    rate_limit_pause_s: float = 15.0  # one hit: a short cool-down, so the next call goes elsewhere
    rate_limit_hits: int = 2  # this many hits within the window ...
    rate_limit_window_s: float = 60.0
    rate_limit_cooldown_s: float = 600.0  # ... keep it out this long
    usage_limit_default_s: float = 3600.0  # when the agent names no reset time
    backoff_first_s: float = 30.0
    backoff_max_s: float = 900.0


@dataclass(frozen=True)
class Exclusion:
    executor: str
    kind: ExclusionKind
    reason: str
    until: datetime | None = None

    def describe(self) -> str:
        if self.kind == "run":
            return f"out for this run: {self.reason}"
        assert self.until is not None
        return f"out until {iso(self.until)}: {self.reason}"


@dataclass
class Health:
    """What the policy remembers of an executor's recent failures (in memory only)."""

    rate_hits: list[datetime] = field(default_factory=list)
    backoff_s: float | None = None  # the last back-off wait; None after a success


def _short(message: str, limit: int = 160) -> str:
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# How a turn holds its executor, which decides what an executor fault does to it:
# `leased` a call that leased one for itself; `borrowed` a planner/reviewer/judge turn on the
# story's own coder clone; `held` the story coder's turn on the clone it holds; `parallel` a
# parallel task's coder in the task's own worktree.
Holding = Literal["leased", "borrowed", "held", "parallel"]


def after_fault(holding: Holding, kind: FailureKind, *, excluded: bool, retried: bool) -> str | None:
    """What a turn that failed with `kind` does next (docs/roster.md "Failures"), once at most:
    `"elsewhere"` (ask another executor, the same one once its exclusion ends if none other
    can ever serve), `"same"` (wait for this executor to come back, then ask it), or None (the
    error goes up). Only executor faults move a turn; the quality of its work never does."""
    if retried or kind not in EXECUTOR_FAULTS or holding == "parallel":
        return None  # a parallel task fails on its own: its story's task graph decides
    if holding == "held":
        return "elsewhere"  # a held coder cannot keep a failing clone, excluded or not
    if not excluded:
        return None  # the executor still serves: the error is the turn's
    return "same" if holding == "borrowed" else "elsewhere"  # a borrowed clone is the only one


def decide(
    executor: str,
    kind: FailureKind,
    message: str,
    reset_at: datetime | None,
    now: datetime,
    health: Health,
    policy: ExclusionPolicy,
) -> Exclusion | None:
    """The exclusion a failure earns, or None; updates `health` (rate-limit hits, back-off)."""
    if kind == "rate_limit":
        window_start = now - timedelta(seconds=policy.rate_limit_window_s)
        health.rate_hits = [t for t in health.rate_hits if t > window_start] + [now]
        hits = len(health.rate_hits)
        if hits >= policy.rate_limit_hits:
            health.rate_hits = []
            return Exclusion(
                executor,
                "until",
                f"{hits} rate limits within {policy.rate_limit_window_s:g}s ({_short(message)})",
                now + timedelta(seconds=policy.rate_limit_cooldown_s),
            )
        return Exclusion(
            executor,
            "until",
            f"rate limited ({_short(message)})",
            now + timedelta(seconds=policy.rate_limit_pause_s),
        )
    if kind == "usage_limit":
        until = reset_at if reset_at is not None and reset_at > now else None
        if until is None:
            until = now + timedelta(seconds=policy.usage_limit_default_s)
        return Exclusion(executor, "until", f"usage limit ({_short(message)})", until)
    if kind == "auth":
        return Exclusion(
            executor, "run", f"not signed in, model unavailable or program too old ({_short(message)})"
        )
    if kind in ("unavailable", "crash", "stall"):
        # The agent did not start, died, or went silent: wait, then let the next lease probe it.
        wait = policy.backoff_first_s if health.backoff_s is None else health.backoff_s * 2
        wait = min(wait, policy.backoff_max_s)
        health.backoff_s = wait
        return Exclusion(
            executor, "backoff", f"not answering ({_short(message)})", now + timedelta(seconds=wait)
        )
    # A timeout excludes nothing (a long turn is no broken executor, though a story's coder may be
    # handed over: EXECUTOR_FAULTS in agents/base.py); bad_reply, error, cancelled are the turn's.
    return None


# --- the state file ------------------------------------------------------------------------------


class StoredExclusion(WireModel):
    executor: str
    kind: Literal["until", "backoff"]
    reason: str
    until: str


class RosterStateFile(WireModel):
    schema_version: int = STATE_SCHEMA_VERSION
    exclusions: list[StoredExclusion] = []


def _warn(message: str) -> None:
    print(f"flowd: {message}", file=sys.stderr)


def _read(path: Path) -> RosterStateFile | None:
    """The state file, or None when it is missing or unreadable (advisory state: warn, go on)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        _warn(f"{path}: ignored, it is not readable JSON ({exc}); it will be rewritten")
        return None
    try:
        state = RosterStateFile.model_validate(raw)
    except ValidationError:
        _warn(f"{path}: ignored, it is not a roster state file; it will be rewritten")
        return None
    if state.schema_version != STATE_SCHEMA_VERSION:
        _warn(f"{path}: ignored, schemaVersion {state.schema_version} is not {STATE_SCHEMA_VERSION}")
        return None
    return state


def load_exclusions(path: Path, executors: set[str], now: datetime) -> dict[str, Exclusion]:
    """Exclusions still in force for executors of this roster (expired and unknown ones dropped)."""
    state = _read(path)
    found: dict[str, Exclusion] = {}
    if state is None:
        return found
    for entry in state.exclusions:
        try:
            until = parse_iso(entry.until)
        except ValueError:
            continue
        if entry.executor in executors and until > now:
            found[entry.executor] = Exclusion(entry.executor, entry.kind, entry.reason, until)
    return found


def save_exclusions(path: Path, executors: set[str], current: dict[str, Exclusion], now: datetime) -> None:
    """Rewrite the file: other rosters' entries kept (if still in force), this roster's replaced."""
    state = _read(path) or RosterStateFile()
    kept = [e for e in state.exclusions if e.executor not in executors and _in_force(e.until, now)]
    ours = [
        StoredExclusion(executor=x.executor, kind=x.kind, reason=x.reason, until=iso(x.until))
        for x in current.values()
        if x.kind != "run" and x.until is not None and x.until > now
    ]
    if not state.exclusions and not ours and not path.exists():
        return  # nothing to remember: do not create the file
    write_model_atomic(path, RosterStateFile(exclusions=sorted(kept + ours, key=lambda e: e.executor)))


def _in_force(until: str, now: datetime) -> bool:
    try:
        return parse_iso(until) > now
    except ValueError:
        return False
