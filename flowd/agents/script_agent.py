"""`flowd agent script --script FILE`: a real ACP agent process that follows a script (docs/scripted-agent.md).

It speaks ACP over stdio through the `acp` SDK exactly like a model-backed agent would: live
`agent_message_chunk` and `tool_call` updates, permission requests before touching files or
running commands, per-turn `PromptResponse.usage` reported the way claude-agent-acp does (input
without the cache, cache apart) and the dollar cost as a cumulative `usage_update` per session.

`times` counts prompts per run across every process of the agent (clones, restarts, sessions),
so counts live in a small file guarded by `fcntl.flock`: in `$FLOWD_SCRIPT_STATE` when set, else
in a per-script directory under the system temp dir keyed by the script's path and content.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from flowd.agents.script_model import Rule, Script, ScriptUsage, load_script, pick_rule

log = logging.getLogger("flowd.agent.script")

STATE_ENV = "FLOWD_SCRIPT_STATE"
_KEPT_RUNS = 50  # counts of older runs are dropped so the state file stays small


class RunCounts:
    """`times` bookkeeping shared by every process serving one script: {runId: {ruleIndex: n}}.

    One file per script (named by a hash of its path and content), read and rewritten under an
    exclusive `flock` on the file itself, so concurrent clones never lose a count.
    """

    def __init__(self, script_path: Path, script_text: bytes) -> None:
        configured = os.environ.get(STATE_ENV)
        base = Path(configured) if configured else Path(tempfile.gettempdir()) / "flowd-script-state"
        key = hashlib.sha256(str(script_path.resolve()).encode() + b"\0" + script_text).hexdigest()[:16]
        self.path = base / f"{script_path.name}-{key}.json"

    def take(self, run_id: str, choose: Any) -> int | None:
        """Under the lock: `choose(counts)` picks a rule index (or None), whose count then goes up."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with open(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                handle.seek(0)
                data = _parse(handle.read())
                runs: dict[str, dict[str, int]] = data.setdefault("runs", {})
                counts = runs.get(run_id, {})
                index: int | None = choose({int(k): v for k, v in counts.items()})
                if index is not None:
                    counts[str(index)] = counts.get(str(index), 0) + 1
                    runs.pop(run_id, None)
                    runs[run_id] = counts  # most recent last, so trimming drops the oldest runs
                    while len(runs) > _KEPT_RUNS:
                        runs.pop(next(iter(runs)))
                    handle.seek(0)
                    handle.truncate()
                    handle.write(json.dumps(data))
                    handle.flush()
                return index
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _parse(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}  # a torn write (the machine died mid-write): counting starts afresh
    return data if isinstance(data, dict) else {}


def default_reply(role: str | None, story: str | None, epic_id: str | None) -> str:
    """What the agent answers when no rule matches (docs/scripted-agent.md)."""
    if role == "planner":
        title = story or epic_id or "work"
        return json.dumps({"tasks": [{"title": title, "description": f"Do {title}.\nDepends on: none"}]})
    if role in ("reviewer", "judge"):
        return json.dumps({"issues": [], "summary": "ok"})
    return "Nothing to change.\nTASK_ALREADY_SATISFIED"


def failure_message(mode: str, reply: str | None, now: datetime | None = None) -> tuple[int, str, str]:
    """(JSON-RPC code, message, details) worded like the real agents' errors."""
    if mode == "rate_limit":
        return -32603, "Internal error", "API Error: 429 rate limit exceeded, please retry shortly"
    if mode == "usage_limit":
        reset = (now or datetime.now(UTC)) + timedelta(hours=1)
        wall = reset.strftime("%I:%M%p").lstrip("0").lower()
        return -32603, "Internal error", f"Claude AI usage limit reached · resets {wall} (UTC)"
    if mode == "auth":
        return -32000, "Authentication required", "Not logged in · Please run /login"
    return -32603, "Internal error", reply or "scripted error"


class ScriptAgent:
    """The ACP `Agent` implementation: one per process, many sessions."""

    def __init__(self, script: Script, counts: RunCounts) -> None:
        self._script = script
        self._counts = counts
        self._conn: Any = None
        self._sessions: dict[str, Path] = {}
        self._cost: dict[str, float] = {}  # cumulative per session, as claude-agent-acp reports it
        self._calls = 0
        self._cancelled: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **_: Any) -> Any:
        from acp import InitializeResponse
        from acp.schema import AgentCapabilities, Implementation

        return InitializeResponse(
            protocol_version=protocol_version,
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(name="flowd-script", title="flowd scripted agent", version="1"),
        )

    async def new_session(self, cwd: str, **_: Any) -> Any:
        from acp import NewSessionResponse

        session_id = f"script-{uuid.uuid4().hex[:12]}"
        self._sessions[session_id] = Path(cwd)
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **_: Any) -> None:
        # Honoured during `delayMs`, as ACP asks (reply `cancelled`); a `hang` rule ignores it.
        self._cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(self, prompt: list[Any], session_id: str, **meta: Any) -> Any:
        from acp import PromptResponse, RequestError
        from acp.schema import Usage

        cwd = self._sessions.get(session_id)
        if cwd is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        raw_meta = meta.get("flowd")
        flowd: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        role, story, task = flowd.get("role"), flowd.get("story"), flowd.get("task")
        run_id = str(flowd.get("runId") or "no-run")
        text = "\n".join(getattr(block, "text", "") or "" for block in prompt)

        def choose(counts: dict[int, int]) -> int | None:
            return pick_rule(self._script, counts, role=role, story=story, task=task, prompt=text)

        cancelled = self._cancelled[session_id] = asyncio.Event()
        index = await asyncio.to_thread(self._counts.take, run_id, choose)
        rule = self._script.rules[index] if index is not None else Rule()
        if rule.delay_ms:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cancelled.wait(), rule.delay_ms / 1000)
            if cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
        await self._think(session_id, f"Working as {role or 'agent'}" + (f" on {task}" if task else "") + ".")
        raw_env = flowd.get("env")
        lane_env = {str(k): str(v) for k, v in raw_env.items()} if isinstance(raw_env, dict) else {}
        refused = await self._act(session_id, cwd, rule, lane_env)
        if rule.fail == "crash":
            os._exit(3)
        if rule.fail == "hang":
            await asyncio.Event().wait()
        if rule.fail is not None:
            code, message, details = failure_message(rule.fail, rule.reply)
            raise RequestError(code, message, {"details": details})
        reply = rule.reply if rule.reply is not None else default_reply(role, story, flowd.get("epicId"))
        if refused:
            reply += "\n" + "\n".join(f"(permission refused: {item})" for item in refused)
        # Two chunks, as streaming agents send them: clients must concatenate.
        half = len(reply) // 2
        for piece in (reply[:half], reply[half:]):
            if piece:
                await self._say(session_id, piece)
        usage = rule.usage
        if usage is not None and usage.cost_usd is not None:
            await self._report_cost(session_id, usage)
        return PromptResponse(
            stop_reason="end_turn",
            usage=_wire_usage(usage, Usage) if usage is not None else None,
            field_meta={"model": self._script.model},
        )

    async def _act(self, session_id: str, cwd: Path, rule: Rule, env: dict[str, str]) -> list[str]:
        """Writes, deletes and commands, each announced as a tool call and asked permission for.
        Commands run with the lane's `_meta.flowd.env` (FLOWD_PORT…) set, as a real agent's shell
        would once it read them from its prompt."""
        from acp import start_tool_call, update_tool_call
        from acp.schema import ToolCallLocation

        refused: list[str] = []
        steps: list[tuple[str, str, str, str | None]] = [
            ("edit", f"Write {path}", path, content) for path, content in rule.writes.items()
        ]
        steps += [("delete", f"Delete {path}", path, None) for path in rule.deletes]
        steps += [("execute", f"Run {command}", command, None) for command in rule.run]
        for kind, title, target, content in steps:
            self._calls += 1
            call_id = f"call_{self._calls}"
            where = str(cwd) if kind == "execute" else os.path.normpath(os.path.join(cwd, target))
            raw = {"command": target, "cwd": str(cwd)} if kind == "execute" else {"path": where}
            await self._conn.session_update(
                session_id,
                start_tool_call(
                    call_id,
                    title,
                    kind=kind,  # type: ignore[arg-type]
                    status="pending",
                    locations=[ToolCallLocation(path=where)],
                    raw_input=raw,
                ),
            )
            if not await self._allowed(session_id, call_id, title, kind, where, raw):
                refused.append(title)
                await self._conn.session_update(session_id, update_tool_call(call_id, status="failed"))
                continue
            ok = await asyncio.to_thread(_perform, kind, cwd, where, target, content, env)
            await self._conn.session_update(
                session_id, update_tool_call(call_id, status="completed" if ok else "failed")
            )
        return refused

    async def _allowed(
        self, session_id: str, call_id: str, title: str, kind: str, where: str, raw: dict[str, str]
    ) -> bool:
        from acp.schema import PermissionOption, ToolCallLocation, ToolCallUpdate

        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        response = await self._conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(
                tool_call_id=call_id,
                title=title,
                kind=kind,  # type: ignore[arg-type]
                locations=[ToolCallLocation(path=where)],
                raw_input=raw,
            ),
            options=options,
        )
        outcome = response.outcome
        return getattr(outcome, "outcome", "") == "selected" and getattr(outcome, "option_id", "") == "allow"

    async def _say(self, session_id: str, text: str) -> None:
        from acp import update_agent_message_text

        await self._conn.session_update(session_id, update_agent_message_text(text))

    async def _think(self, session_id: str, text: str) -> None:
        from acp import update_agent_thought_text

        await self._conn.session_update(session_id, update_agent_thought_text(text))

    async def _report_cost(self, session_id: str, usage: ScriptUsage) -> None:
        from acp.schema import Cost, UsageUpdate

        total = self._cost.get(session_id, 0.0) + float(usage.cost_usd or 0.0)
        self._cost[session_id] = total
        await self._conn.session_update(
            session_id,
            UsageUpdate(
                session_update="usage_update",
                used=usage.input + usage.output,
                size=200_000,
                cost=Cost(amount=total, currency="USD"),
            ),
        )


def _wire_usage(usage: ScriptUsage, usage_type: Any) -> Any:
    # Like claude-agent-acp: inputTokens without the cache, the cache apart, total over all four.
    uncached = usage.input - usage.cached_read - usage.cache_write
    return usage_type(
        input_tokens=uncached,
        output_tokens=usage.output,
        cached_read_tokens=usage.cached_read,
        cached_write_tokens=usage.cache_write,
        total_tokens=usage.input + usage.output,
    )


def _perform(
    kind: str, cwd: Path, where: str, target: str, content: str | None, env: dict[str, str] | None = None
) -> bool:
    import subprocess

    try:
        if kind == "edit":
            path = Path(where)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content or "", encoding="utf-8")
        elif kind == "delete":
            path = Path(where)
            if path.is_dir() and not path.is_symlink():
                import shutil

                shutil.rmtree(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        else:
            # stdout is the ACP channel: a command's output goes to stderr (the client's log).
            done = subprocess.run(
                target,
                shell=True,
                cwd=cwd,
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno(),
                env={**os.environ, **(env or {})},
            )
            return done.returncode == 0
    except OSError as exc:
        log.warning("%s %s failed: %s", kind, target, exc)
        return False
    return True


def agent_command(args: argparse.Namespace) -> int:
    """Serve the script over stdio until the client closes stdin."""
    path = Path(args.script)
    script = load_script(path)
    counts = RunCounts(path, path.read_bytes())
    logging.basicConfig(level=logging.WARNING, format="flowd-script: %(message)s")
    import acp

    asyncio.run(acp.run_agent(cast(acp.Agent, ScriptAgent(script, counts))))
    return 0
