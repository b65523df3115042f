"""Opening a session on an ACP agent: `session/new` in the turn's directory with the roster's
`model` made the session's (each agent takes it its own way), codex-acp's full-access mode in a
confined lane, and a title (docs/roster.md, docs/sandbox.md)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from acp import RequestError

from flowd.agents.acp_process import AgentProcess, error_text
from flowd.agents.base import AgentError
from flowd.agents.faults import classify

_FULL_ACCESS = "agent-full-access"  # codex-acp's session mode without its own sandbox


class SessionOpener:
    """Opens the sessions of one clone's agent process."""

    def __init__(self, agent: AgentProcess, *, label: str, model: str | None) -> None:
        self._agent = agent
        self.label = label
        self._model = model

    async def open(self, conn: Any, cwd: Path) -> str:
        """A new session in `cwd`, set up; its id. A refusal is an `AgentError`; a connection
        that broke (`ConnectionError`, `OSError`) is the caller's to report."""
        try:
            response = await conn.new_session(cwd=str(cwd), mcp_servers=[], **self._session_meta())
            await self._apply_model(response)
            await self._unsandbox(response)
            await self._name_session(str(response.session_id), cwd)
        except RequestError as exc:
            text = error_text(exc)
            kind, reset_at = classify(text)
            raise AgentError(
                "auth" if exc.code == -32000 else kind, f"{self.label}: {text}", reset_at=reset_at
            )
        return str(response.session_id)

    async def _unsandbox(self, response: Any) -> None:
        """In a confined lane, codex-acp runs its commands in its full-access mode: its own
        sandbox (bubblewrap) cannot start inside a Landlock domain, which may not mount, and
        the lane's confinement takes its place (docs/sandbox.md "Agents' own sandboxes")."""
        conn = self._agent.conn
        if conn is None or self._agent.confined_to is None or "codex-acp" not in self._agent.agent_name:
            return
        modes = getattr(response, "modes", None)
        offered = {str(getattr(m, "id", "")) for m in getattr(modes, "available_modes", None) or []}
        if _FULL_ACCESS in offered:
            await conn.set_session_mode(session_id=str(response.session_id), mode_id=_FULL_ACCESS)

    def _session_meta(self) -> dict[str, Any]:
        """`_meta` for `session/new`: claude-agent-acp takes SDK options there (others ignore it)."""
        options: dict[str, Any] = {"promptSuggestions": False}
        if self._model:
            options["model"] = self._model
        return {"claudeCode": {"options": options}}

    async def _name_session(self, session_id: str, cwd: Path) -> None:
        """Give the session a title when the agent takes one: codex otherwise asks its model for
        a title on the first prompt, a request no usage report mentions (docs/roster.md)."""
        # An agent without the method answers -32601; nothing is lost.
        with contextlib.suppress(RequestError):
            await self._agent.conn._conn.send_request(
                "session/set_title", {"sessionId": session_id, "title": f"flowd {cwd.name}"}
            )

    async def _set_model(self, session_id: str) -> None:
        """ACP's `session/set_model` (gemini: a fixed model also stops its routing requests)."""
        try:
            await self._agent.conn._conn.send_request(
                "session/set_model", {"sessionId": session_id, "modelId": self._model}
            )
        except RequestError as exc:
            if exc.code == -32601:
                return  # the agent cannot switch models: it runs what its own config names
            raise self._model_error(exc, None) from None

    def _model_error(self, exc: RequestError, offered: str | None) -> AgentError:
        """Switching the model failed: a sign-in or rate limit (claude checks the model with a
        request) is that; anything else means the agent does not take the roster's `model`."""
        text = error_text(exc)
        kind, reset_at = classify(text)
        if kind != "error":
            return AgentError(kind, f"{self.label}: {text}", reset_at=reset_at)
        choices = f"one it offers: {offered}" if offered else "one the agent offers"
        return AgentError(
            "auth",
            f"{self.label}: the agent rejected model {self._model!r} ({text}); "
            f"set the roster's `model` to {choices}",
        )

    async def _apply_model(self, response: Any) -> None:
        """Make the roster's `model` the session's, through the agent's `model` config option."""
        conn = self._agent.conn
        if not self._model or conn is None:
            return
        if "claude-agent-acp" in self._agent.agent_name:
            # It took the model from `_meta.claudeCode.options` (`_session_meta`); switching
            # through the option would cost a model check request it reports nowhere.
            return
        option = next((o for o in response.config_options or [] if _option_id(o) == "model"), None)
        if option is None:
            await self._set_model(str(response.session_id))
            return
        if getattr(getattr(option, "root", option), "current_value", None) == self._model:
            return
        try:
            await conn.set_config_option(
                config_id="model", session_id=str(response.session_id), value=self._model
            )
        except RequestError as exc:
            raise self._model_error(exc, ", ".join(_option_values(option)[:8]) or "none listed") from None


def _option_id(option: Any) -> str | None:
    root = getattr(option, "root", option)
    return getattr(root, "id", None)


def _option_values(option: Any) -> list[str]:
    root = getattr(option, "root", option)
    values: list[str] = []
    for entry in getattr(root, "options", None) or []:
        entry = getattr(entry, "root", entry)
        if hasattr(entry, "value"):
            values.append(str(entry.value))
        values += [str(o.value) for o in getattr(entry, "options", None) or [] if hasattr(o, "value")]
    return values
