"""What an ACP agent may touch through flowd: the client side it calls back into (file reads and
writes, permission requests) and the path policy that keeps them inside the session's working
directory (docs/roster.md)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, Protocol

from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    ReadTextFileResponse,
    RequestPermissionResponse,
    ToolCallStart,
    ToolCallUpdate,
    WriteTextFileResponse,
)

from flowd.agents.acp_turn import Turn, tool_args, tool_name
from flowd.agents.base import ToolCall

log = logging.getLogger("flowd.agents.acp")

_PATH_KEYS = ("path", "file_path", "filePath", "notebook_path", "abs_path", "absolutePath")


class ClientOwner(Protocol):
    """The executor behind the client: it knows the sessions and the turn in flight."""

    def _on_update(self, session_id: str, update: Any) -> None: ...

    def _on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse: ...

    def _checked_path(self, session_id: str, path: str, action: str) -> str: ...


class AcpClient:
    """The ACP client side the agent calls back into. `session_update` never awaits (order)."""

    def __init__(self, owner: ClientOwner) -> None:
        self._owner = owner

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self._owner._on_update(session_id, update)

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        return self._owner._on_permission(session_id, tool_call, options)

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **_: Any
    ) -> ReadTextFileResponse:
        target = self._owner._checked_path(session_id, path, "read")
        try:
            text = await asyncio.to_thread(Path(target).read_text, encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise RequestError.resource_not_found(path)
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit is not None else None])
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse:
        target = Path(self._owner._checked_path(session_id, path, "write"))

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")

        await asyncio.to_thread(write)
        return WriteTextFileResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.debug("agent extension notification %s", method)


def outside(cwd: Path, path: str) -> bool:
    """True when `path` (absolute, or relative to `cwd`) resolves outside `cwd`, symlinks followed."""
    root = os.path.realpath(cwd)
    target = os.path.realpath(os.path.join(root, path))
    return os.path.commonpath([root, target]) != root


def tool_paths(tool_call: ToolCallUpdate | ToolCallStart) -> list[str]:
    """Every file path a tool call names, in its locations and its raw input."""
    paths = [loc.path for loc in tool_call.locations or []]
    raw = tool_call.raw_input
    if isinstance(raw, dict):
        paths += [str(raw[key]) for key in _PATH_KEYS if isinstance(raw.get(key), str)]
    return paths


def permission(
    turn: Turn | None,
    cwd: Path | None,
    tool_call: ToolCallUpdate,
    options: list[PermissionOption],
    label: str,
) -> RequestPermissionResponse:
    """The answer to the agent's permission request: a tool call naming a path outside the working
    directory `cwd` (the session's) is refused and the refusal recorded in the turn."""
    if turn is None or turn.cancelled or cwd is None:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
    if tool_call.tool_call_id not in turn.known or tool_call.tool_call_id in turn.pending:
        # gemini asks before it announces the call: the request is the call's only trace.
        call = turn.pending.get(tool_call.tool_call_id) or ToolCall(
            tool=tool_name(tool_call), args=tool_args(tool_call)
        )
        if tool_call.raw_input:
            call.args = tool_call.raw_input
        turn.tool(tool_call.tool_call_id, call, ready=True)
    escaping = [path for path in tool_paths(tool_call) if outside(cwd, path)]
    wanted = ("reject_once", "reject_always") if escaping else ("allow_once", "allow_always")
    choice = next((o for o in options if o.kind == wanted[0]), None) or next(
        (o for o in options if o.kind == wanted[1]), None
    )
    if escaping:
        title = tool_call.title or tool_call.kind or "tool call"
        turn.refusals.append(f"{title}: {escaping[0]} is outside the working directory {cwd}")
        log.info("%s: refused %s (outside %s)", label, title, cwd)
    if choice is None:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
    return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice.option_id))


def checked_path(cwd: Path | None, session_id: str, path: str, action: str, turn: Turn | None) -> str:
    """The real path the agent may `action` (read, write), or the JSON-RPC error refusing it; a
    refusal is recorded in the turn in flight."""
    if cwd is None:
        raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
    if not os.path.isabs(path):
        raise RequestError.invalid_params({"path": path, "reason": "path must be absolute"})
    if outside(cwd, path):
        if turn is not None:
            turn.refusals.append(f"{action} {path}: outside the working directory {cwd}")
        raise RequestError.invalid_params({"path": path, "reason": "outside the working directory"})
    return os.path.realpath(path)
