"""One ACP turn as it arrives: message chunks, tool calls, refusals, codex's failure notes and the
agent's cumulative cost, folded in arrival order into a `TurnResult` (docs/roster.md, docs/trace.md).

Pure: the executor (`flowd.agents.acp_client`) feeds it the agent's `session/update`s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp.schema import (
    AgentMessageChunk,
    PromptResponse,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
)

from flowd.agents.base import ToolCall, TurnObserver, TurnResult
from flowd.agents.usage import capture_usage, model_usages
from flowd.sandbox.confine import strings_in

log = logging.getLogger("flowd.agents.acp")


@dataclass
class Turn:
    session_id: str
    cwd: Path
    observe: TurnObserver | None
    chunks: list[tuple[str | None, str]] = field(default_factory=list)  # (message id, text)
    message_id: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    cost_seen: float | None = None
    # Tool calls announced before their input is known (claude streams `rawInput: {}` first):
    # told to the observer once the input arrives, the call runs, or the turn ends.
    pending: dict[str, ToolCall] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    # codex-acp ends a failed turn with `end_turn`: the failure is in `session_info_update._meta`
    # (a `systemError` thread status, an `error`) and its text in a message without an id.
    failed: bool = False
    errors: list[str] = field(default_factory=list)
    cancelled: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def tool(self, call_id: str, call: ToolCall, *, ready: bool) -> None:
        if call_id in self.known and call_id not in self.pending:
            return
        self.known.add(call_id)
        if not ready:
            self.pending[call_id] = call
            return
        self.pending.pop(call_id, None)
        self.tool_calls.append(call)
        self.emit(call)

    def answer(self) -> str:
        """The reply: when the agent numbers its messages, only those; a chunk without an id
        beside them is a notice (codex prepends "Warning: Model metadata … not found")."""
        numbered = [text for message_id, text in self.chunks if message_id]
        return "".join(numbered if numbered else [text for _, text in self.chunks]).strip()

    def failure(self) -> str | None:
        """The turn's failure text, when the agent reported one beside an `end_turn`."""
        if not (self.failed or self.errors):
            return None
        notes = [text.strip() for message_id, text in self.chunks if not message_id and text.strip()]
        # codex's standing "Warning: Model metadata … not found" is not what failed.
        failures = [note for note in notes if not note.lower().startswith("warning")] or notes
        return "; ".join([*self.errors, *failures]) or "the agent reported a failed turn"

    def flush_tools(self) -> None:
        for call_id, call in list(self.pending.items()):
            self.tool(call_id, call, ready=True)

    def emit(self, item: ToolCall | str) -> None:
        if self.observe is None:
            return
        try:
            self.observe(item)
        except Exception:  # an observer's bug must not end the agent's turn
            log.exception("turn observer failed")


def fold_update(turn: Turn, update: Any, label: str) -> None:
    """One of the turn's `session/update`s folded in; never awaits, so updates keep their order."""
    if isinstance(update, AgentMessageChunk):
        if _is_notice(update.field_meta):
            log.info("%s: agent notice: %s", label, getattr(update.content, "text", ""))
        elif isinstance(update.content, TextContentBlock):
            text = update.content.text
            if update.message_id and turn.message_id and update.message_id != turn.message_id:
                text = "\n\n" + text
            turn.message_id = update.message_id or turn.message_id
            turn.chunks.append((update.message_id, text))
            turn.emit(text)
    elif isinstance(update, ToolCallStart):
        call = ToolCall(tool=tool_name(update), args=tool_args(update), parent=_parent(update.field_meta))
        # claude announces `rawInput: {}` and streams the input after; gemini sends none.
        ready = bool(update.raw_input) or update.status in ("in_progress", "completed", "failed")
        turn.tool(update.tool_call_id, call, ready=ready)
    elif isinstance(update, ToolCallProgress) and update.tool_call_id in turn.pending:
        call = turn.pending[update.tool_call_id]
        if update.raw_input:
            call.args = update.raw_input
        if update.raw_input or update.status in ("in_progress", "completed", "failed"):
            turn.tool(update.tool_call_id, call, ready=True)
    elif isinstance(update, SessionInfoUpdate):
        _note_status(turn, update.field_meta)
    elif (
        isinstance(update, UsageUpdate) and update.cost is not None and update.cost.currency.upper() == "USD"
    ):
        turn.cost_seen = float(update.cost.amount)


def turn_result(
    turn: Turn, response: PromptResponse, cost_base: dict[str, float], default_model: str | None
) -> TurnResult:
    """The finished turn; `cost_base` holds each session's cumulative cost so far (updated here)."""
    turn.flush_tools()
    per_model = model_usages(response.field_meta or {})
    usage = per_model[0] if per_model else capture_usage(response)
    more = per_model[1:]
    if turn.cost_seen is not None:
        previous = cost_base.get(turn.session_id, 0.0)
        cost_base[turn.session_id] = turn.cost_seen
        # A smaller cumulative figure means the agent started counting afresh.
        delta = turn.cost_seen - previous if turn.cost_seen >= previous else turn.cost_seen
        if usage is not None:
            usage.cost_usd = round(delta, 10)
            for other in more:
                other.cost_usd = 0.0  # the agent's figure covers every model of the turn
    model = (usage.model if usage is not None else None) or default_model
    if usage is not None and usage.model is None:
        usage.model = model
    return TurnResult(
        text=turn.answer(),
        usage=usage,
        more_usage=more,
        tool_calls=list(turn.tool_calls),
        stop_reason=response.stop_reason,
        refusals=list(turn.refusals),
        model=model,
    )


def _note_status(turn: Turn, meta: dict[str, Any] | None) -> None:
    """codex-acp's thread status and error in `session_info_update._meta.codex`."""
    codex = (meta or {}).get("codex")
    if not isinstance(codex, dict):
        return
    status = codex.get("threadStatus")
    if isinstance(status, dict) and status.get("type") == "systemError":
        turn.failed = True
    error = codex.get("error")
    if isinstance(error, str) and error.strip():
        turn.errors.append(error.strip())
    elif isinstance(error, dict):
        text = error.get("message") or error.get("details")
        turn.errors.append(str(text) if text else json.dumps(error, default=str)[:500])


def _is_notice(meta: dict[str, Any] | None) -> bool:
    """A message chunk that is the agent's notice, not its answer (claude marks them in `_meta`)."""
    claude = (meta or {}).get("claudeCode")
    return isinstance(claude, dict) and isinstance(claude.get("kind"), str)


def tool_name(update: ToolCallStart | ToolCallUpdate) -> str:
    meta = update.field_meta or {}
    claude = meta.get("claudeCode")
    if isinstance(claude, dict) and isinstance(claude.get("toolName"), str):
        return str(claude["toolName"])
    # gemini names its calls `<tool>__<tool>_<time>_<n>`; its title is prose ("Writing to a.txt").
    named = re.match(r"([A-Za-z][\w.-]*)__", update.tool_call_id or "")
    if named:
        return named.group(1)
    return update.title or str(update.kind or "tool")


def tool_output_text(update: ToolCallStart | ToolCallProgress) -> str:
    """What a tool call's update says it printed: its text content (gemini) and every string of
    its `rawOutput` (claude's `{"output": …}`) and `_meta` (codex's `terminal_output_delta`)."""
    parts = [
        block.text
        for item in update.content or []
        if isinstance(block := getattr(item, "content", None), TextContentBlock)
    ]
    return "\n".join([*parts, *strings_in([update.raw_output, update.field_meta])])


def tool_args(update: ToolCallStart | ToolCallUpdate) -> Any:
    """The tool's input; when the agent sends none (gemini), what it says it touches."""
    if update.raw_input:
        return update.raw_input
    paths = [loc.path for loc in update.locations or []]
    if not paths and not update.title:
        return update.raw_input
    return {"title": update.title, "paths": paths} if paths else {"title": update.title}


def _parent(meta: dict[str, Any] | None) -> str | None:
    claude = (meta or {}).get("claudeCode")
    if isinstance(claude, dict) and isinstance(claude.get("parentToolUseId"), str):
        return str(claude["parentToolUseId"])
    return None
