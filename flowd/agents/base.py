"""The executor interface every agent kind implements, and its typed failures.

The engine and the roster speak only these types. A kind (ACP, CLI, OpenAI-compatible) turns one
`TurnRequest` into one `TurnResult`, or raises an `AgentError` whose `kind` tells the roster what
to do with the executor (exclude it, hand over, or blame the reply).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from flowd.agents.reaper_native import native_reaper
from flowd.base.wire import WireModel

FailureKind = Literal[
    "rate_limit",  # too many requests: exclude after repeated hits
    "usage_limit",  # quota spent: exclude until reset_at (or a default)
    "auth",  # not signed in / unknown model: exclude for the run
    "unavailable",  # engine down / cannot start: exclude until it answers again
    "crash",  # the agent process died mid-turn
    "timeout",  # turn took longer than the turn timeout
    "stall",  # nothing heard from the agent for the stall timeout ("hang")
    "cancelled",  # the turn was cancelled by flowd
    "bad_reply",  # the reply did not parse: the agent's fault, not the executor's
    "error",  # any other error the agent returned
]

# The one fault table: the failures that are the executor's fault (it is excluded, and a call may
# move to another executor or wait for it to come back). The rest (`cancelled`, `bad_reply`,
# `error`) are the turn's own problem: never retried on another executor.
EXECUTOR_FAULTS: frozenset[FailureKind] = frozenset(
    {"rate_limit", "usage_limit", "auth", "unavailable", "crash", "timeout", "stall"}
)


class AgentError(Exception):
    def __init__(self, kind: FailureKind, message: str, *, reset_at: datetime | None = None) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.message = message
        self.reset_at = reset_at

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class FlowdMeta(WireModel):
    """`_meta.flowd` on every `session/prompt` (docs/scripted-agent.md)."""

    role: str
    run_id: str
    epic_id: str
    story: str | None = None
    task: str | None = None
    task_index: int | None = None
    # The lane's FLOWD_LANE/FLOWD_PORT/FLOWD_PORTS (docs/worktree-bootstrap.md): an agent outlives
    # a lane, so they travel with each prompt instead of in its process environment.
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class TurnRequest:
    role: str
    prompt: str
    cwd: Path
    meta: FlowdMeta
    turn_timeout_s: float = 1800.0
    stall_timeout_s: float = 600.0


@dataclass
class TurnUsage:
    """Per-turn usage as the agent reported it. `input` includes cache reads and writes."""

    input: int = 0
    output: int = 0
    cached_read: int | None = None
    cache_write: int | None = None
    cost_usd: float | None = None  # per-turn (cumulative agent figures are turned into deltas at capture)
    model: str | None = None


@dataclass
class ToolCall:
    tool: str
    args: Any = None
    parent: str | None = None


@dataclass
class TurnResult:
    text: str
    usage: TurnUsage | None = None  # None: the agent reported nothing, the caller estimates
    # Requests of the same turn on other models (a side request on a small model): one more
    # TokensUsed each, attributed to the same role.
    more_usage: list[TurnUsage] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = "end_turn"
    refusals: list[str] = field(default_factory=list)  # permission requests refused by policy
    model: str | None = None


@dataclass
class LateUsage:
    """Usage an agent reported after the turn that caused it: the requests it made on its own
    that finished after that turn's answer (docs/roster.md "Side requests"). Billed to `cause`'s
    lane and role on the executor's clone."""

    cause: TurnRequest
    usage: list[TurnUsage]


# Where an executor sends `LateUsage` (set by the pool that owns it; kinds with none ignore it).
LateUsageSink = Callable[[LateUsage], None]

# Live callback for what happens during a turn (tool calls, message text); must not block.
TurnObserver = Callable[[ToolCall | str], None]


class Executor(Protocol):
    """One clone's connection to one agent. Reused across turns; closed by its owner."""

    async def run_turn(self, request: TurnRequest, observe: TurnObserver | None = None) -> TurnResult: ...

    async def cancel(self) -> None: ...

    async def close(self) -> None: ...


# Defaults flowd gives every agent process (the roster's `env` may override them; docs/roster.md):
# claude's prompt suggestion after each turn is a request nobody reads, and claude retries a
# failed request (a 401 included) for minutes before flowd hears of it; flowd has its own
# exclusions for rate limits and outages.
AGENT_DEFAULT_ENV = {"CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION": "false", "CLAUDE_CODE_MAX_RETRIES": "2"}


def reaped(command: list[str], path: str | None = None, *, native: bool = True) -> list[str]:
    """`command` run under flowd's reaper, so it dies with flowd (flowd/agents/reaper.py): the
    native one (flowd/agents/reaper_native.py, no Python start) where there is one and `native`,
    else reaper.py.

    Raises `AgentError("unavailable")` when the program is not there: one sentence, before any
    process starts.
    """
    program = command[0]
    found = shutil.which(program, path=path)
    if found is None:
        where = "not found on PATH" if os.sep not in program else "missing or not executable"
        fix = "install it, or give the roster entry's `command` its full path"
        raise AgentError("unavailable", f"cannot start {program}: {where} ({fix})")
    fast = native_reaper() if native else None
    if fast is not None:
        return [fast, str(os.getpid()), "--", found, *command[1:]]
    reaper = str(Path(__file__).with_name("reaper.py"))
    return [sys.executable, "-I", "-S", reaper, str(os.getpid()), "--", found, *command[1:]]


def estimate_tokens(text: str) -> int:
    """Characters / 4, the estimate used when an agent reports no usage (marked `estimated`)."""
    return max(1, (len(text) + 3) // 4) if text else 0
