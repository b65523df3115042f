"""`flowd agent script --script FILE`: a real ACP agent process that follows a script (docs/scripted-agent.md).

It speaks ACP's JSON-RPC 2.0 over stdio (one JSON object per line) itself, without the `acp`
SDK or pydantic: the SDK's import alone cost a second of CPU per clone, and a run starts a
clone per lane at once (docs/scripted-agent.md "Wire"). What it sends is what the SDK sent for
it — same methods, camelCase fields, absent fields left out — and flowd's client, which does use
the SDK, validates every message: live `agent_message_chunk` and `tool_call` updates,
permission requests before touching files or running commands, per-turn `usage` reported the way
claude-agent-acp does (input without the cache, cache apart) and the dollar cost as a
cumulative `usage_update` per session.

The wire is `script_wire.py`; the `times` counts shared by every process of the agent are
`script_counts.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flowd.agents.script_counts import RunCounts
from flowd.agents.script_wire import Json, RequestError, Wire, checked_params, invalid_param, serve, warn
from flowd.store.script_rules import Rule, Script, ScriptUsage, pick_rule, read_script

_CONTEXT_SIZE = 200_000  # the `size` of `usage_update`, as claude-agent-acp reports it
_PERMISSION_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def _protocol_version(value: Any) -> int:
    """Like the SDK: a number as given; a legacy date string (Zed's) as a number, or else 1."""
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


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
    """The agent: one per process, many sessions; each handler takes the request's params and
    returns its result (or raises `RequestError`)."""

    def __init__(self, script: Script, counts: RunCounts, wire: Wire) -> None:
        self._script = script
        self._counts = counts
        self._wire = wire
        self._sessions: dict[str, Path] = {}
        self._cost: dict[str, float] = {}  # cumulative per session, as claude-agent-acp reports it
        self._calls = 0
        self._calls_lock = threading.Lock()
        self._cancelled: dict[str, threading.Event] = {}

    def initialize(self, params: Any) -> Json:
        version = _protocol_version(checked_params(params, {"protocolVersion": object})["protocolVersion"])
        if not 0 <= version <= 65535:
            raise invalid_param("protocolVersion", "range", "Input should be within 0-65535", version)
        return {
            "protocolVersion": version,
            "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": "flowd-script", "title": "flowd scripted agent", "version": "1"},
        }

    def new_session(self, params: Any) -> Json:
        checked = checked_params(params, {"cwd": str, "mcpServers": list})
        session_id = f"script-{os.urandom(6).hex()}"
        self._sessions[session_id] = Path(checked["cwd"])
        return {"sessionId": session_id}

    def cancel(self, params: Any) -> None:
        # Honoured during `delayMs`, as ACP asks (reply `cancelled`); a `hang` rule ignores it.
        checked = checked_params(params, {"sessionId": str})
        self._cancelled.setdefault(checked["sessionId"], threading.Event()).set()

    def prompt(self, params: Any) -> Json:
        checked = checked_params(params, {"sessionId": str, "prompt": list})
        session_id: str = checked["sessionId"]
        cwd = self._sessions.get(session_id)
        if cwd is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        meta = checked.get("_meta")
        raw_flowd = meta.get("flowd") if isinstance(meta, dict) else None
        flowd: Json = raw_flowd if isinstance(raw_flowd, dict) else {}
        role, story, task = flowd.get("role"), flowd.get("story"), flowd.get("task")
        run_id = str(flowd.get("runId") or "no-run")
        text = "\n".join(_block_text(block) for block in checked["prompt"])

        def choose(counts: dict[int, int]) -> int | None:
            return pick_rule(self._script, counts, role=role, story=story, task=task, prompt=text)

        cancelled = self._cancelled[session_id] = threading.Event()
        index = self._counts.take(run_id, choose)
        rule = self._script.rules[index] if index is not None else Rule()
        if rule.delay_ms and cancelled.wait(rule.delay_ms / 1000):
            return {"stopReason": "cancelled"}
        self._update(
            session_id,
            _chunk(
                "agent_thought_chunk", f"Working as {role or 'agent'}" + (f" on {task}" if task else "") + "."
            ),
        )
        raw_env = flowd.get("env")
        lane_env = {str(k): str(v) for k, v in raw_env.items()} if isinstance(raw_env, dict) else {}
        refused = self._act(session_id, cwd, rule, lane_env)
        if rule.fail == "crash":
            os._exit(3)
        if rule.fail == "hang":
            threading.Event().wait()
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
                self._update(session_id, _chunk("agent_message_chunk", piece))
        usage = rule.usage
        if usage is not None and usage.cost_usd is not None:
            self._report_cost(session_id, usage)
        result: Json = {"stopReason": "end_turn"}
        if usage is not None:
            result["usage"] = wire_usage(usage)
        result["_meta"] = {"model": self._script.model}
        return result

    def _update(self, session_id: str, update: Json) -> None:
        self._wire.notify("session/update", {"sessionId": session_id, "update": update})

    def _act(self, session_id: str, cwd: Path, rule: Rule, env: dict[str, str]) -> list[str]:
        """Writes, deletes and commands, each announced as a tool call and asked permission for.
        Commands run with the lane's `_meta.flowd.env` (FLOWD_PORT…) set, as a real agent's shell
        would once it read them from its prompt."""
        refused: list[str] = []
        steps: list[tuple[str, str, str, str | None]] = [
            ("edit", f"Write {path}", path, content) for path, content in rule.writes.items()
        ]
        steps += [("delete", f"Delete {path}", path, None) for path in rule.deletes]
        steps += [("execute", f"Run {command}", command, None) for command in rule.run]
        for kind, title, target, content in steps:
            with self._calls_lock:
                self._calls += 1
                call_id = f"call_{self._calls}"
            where = str(cwd) if kind == "execute" else os.path.normpath(os.path.join(cwd, target))
            raw = {"command": target, "cwd": str(cwd)} if kind == "execute" else {"path": where}
            call = {"toolCallId": call_id, "title": title, "kind": kind}
            locations = [{"path": where}]
            self._update(
                session_id,
                {
                    **call,
                    "status": "pending",
                    "locations": locations,
                    "rawInput": raw,
                    "sessionUpdate": "tool_call",
                },
            )
            if not self._allowed(session_id, {**call, "locations": locations, "rawInput": raw}):
                refused.append(title)
                self._update(session_id, _progress(call_id, "failed"))
                continue
            ok = _perform(kind, cwd, where, target, content, env)
            self._update(session_id, _progress(call_id, "completed" if ok else "failed"))
        return refused

    def _allowed(self, session_id: str, tool_call: Json) -> bool:
        # The SDK's field order: toolCallId, kind, title, locations, rawInput.
        ordered = {key: tool_call[key] for key in ("toolCallId", "kind", "title", "locations", "rawInput")}
        answer = self._wire.request(
            "session/request_permission",
            {"sessionId": session_id, "toolCall": ordered, "options": _PERMISSION_OPTIONS},
        )
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") not in ("selected", "cancelled"):
            raise invalid_param(
                "outcome", "union_tag_invalid", "Input should be a permission outcome", answer
            )
        return outcome.get("outcome") == "selected" and outcome.get("optionId") == "allow"

    def _report_cost(self, session_id: str, usage: ScriptUsage) -> None:
        total = self._cost.get(session_id, 0.0) + float(usage.cost_usd or 0.0)
        self._cost[session_id] = total
        self._update(
            session_id,
            {
                "used": usage.input + usage.output,
                "size": _CONTEXT_SIZE,
                "cost": {"amount": total, "currency": "USD"},
                "sessionUpdate": "usage_update",
            },
        )


def _block_text(block: Any) -> str:
    """A prompt block's text; other kinds of block (images, resources) count as empty lines."""
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    return ""


def _chunk(kind: str, text: str) -> Json:
    return {"content": {"text": text, "type": "text"}, "sessionUpdate": kind}


def _progress(call_id: str, status: str) -> Json:
    return {"toolCallId": call_id, "status": status, "sessionUpdate": "tool_call_update"}


def wire_usage(usage: ScriptUsage) -> Json:
    """Like claude-agent-acp: inputTokens without the cache, the cache apart, total over all four."""
    return {
        "totalTokens": usage.input + usage.output,
        "inputTokens": usage.input - usage.cached_read - usage.cache_write,
        "outputTokens": usage.output,
        "cachedReadTokens": usage.cached_read,
        "cachedWriteTokens": usage.cache_write,
    }


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
        warn(f"{kind} {target} failed: {exc}")
        return False
    return True


def load(path: Path) -> Script:
    """The script, read without pydantic when it is plainly valid (`script_rules.read_script`);
    anything else goes through `script_model.load_script`, which reports it as `flowd` does."""
    try:
        script = read_script(json.loads(path.read_bytes()))
    except (OSError, ValueError):
        script = None
    if script is not None:
        return script
    from flowd.store.script_model import load_script, plain

    return plain(load_script(path))


def agent_command(args: argparse.Namespace) -> int:
    """Serve the script over stdio until the client closes stdin."""
    path = Path(args.script)
    script = load(path)
    counts = RunCounts(path, path.read_bytes())
    wire = Wire(sys.stdout.buffer)
    serve(ScriptAgent(script, counts, wire), wire, sys.stdin.buffer)
    return 0
