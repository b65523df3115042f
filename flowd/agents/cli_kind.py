"""`kind = "cli"`: one process per turn of a headless agent CLI printing JSON event lines.

Two dialects are understood, and a stream may use either (the parser keys on event types):
- `claude -p --output-format stream-json --verbose`: `system` init, `assistant` messages (text and
  `tool_use` blocks), `user` tool results, and a closing `result` with `usage`, `modelUsage` and
  `total_cost_usd`;
- `codex exec --json`: `thread.started`, `item.started`/`item.completed` (agent_message,
  command_execution, file_change, mcp_tool_call, …), `turn.completed` with `usage`, and
  `turn.failed` / `error`.
The prompt goes to the process's stdin; the process runs in the turn's cwd with the roster's env
over a few of flowd's own variables (PATH, HOME, locale, config dirs; never its secrets). A process that prints nothing for the stall timeout is killed (its whole
process group), as is one that outlives the turn timeout or whose turn is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flowd.agents import npx
from flowd.agents.base import (
    AGENT_DEFAULT_ENV,
    AgentError,
    ToolCall,
    TurnObserver,
    TurnRequest,
    TurnResult,
    TurnUsage,
    reaped,
)
from flowd.agents.faults import classify, worded
from flowd.base import jsonl
from flowd.base.process_start import start_process
from flowd.programs.state_dirs import program_key
from flowd.programs.table import cli_version, program_of, too_old
from flowd.sandbox.confine import Scanner, current, spawning
from flowd.store.config import ExecutorSpec

Dialect = Literal["claude", "codex", "other"]
_LINE_LIMIT = 32 * 1024 * 1024  # one JSON line may carry a whole file's tool result
_STDERR_KEEP = 200  # lines of stderr kept for the error message
# What the CLI gets from flowd's own environment (as for ACP agents); the roster's `env` goes on
# top. Keys and tokens are passed only when the roster names them; the CLIs' own sign-in lives
# under HOME (or the config dirs below), which is why those pass through.
BASE_ENV_KEYS = (
    "PATH", "HOME", "LOGNAME", "USER", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "CLAUDE_CONFIG_DIR",
    "CODEX_HOME", "GEMINI_CLI_HOME", "SYSTEMROOT",
)  # fmt: skip


def cli_environment(roster_env: dict[str, str]) -> dict[str, str]:
    return {**AGENT_DEFAULT_ENV, **{k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}, **roster_env}


def dialect_of(command: list[str]) -> Dialect:
    name = Path(command[0]).name if command else ""
    if name.startswith("claude"):
        return "claude"
    if name.startswith("codex"):
        return "codex"
    return "other"


def build_argv(
    command: list[str], *, model: str | None, resume: str | None = None, confined: bool = False
) -> list[str]:
    """The command with the flags its dialect needs for JSON output, the model and a resumed session."""
    argv = list(command)
    dialect = dialect_of(command)
    if dialect == "claude":
        if "-p" not in argv and "--print" not in argv:
            argv.append("-p")
        if "--output-format" not in argv:
            argv += ["--output-format", "stream-json"]
        if "--verbose" not in argv:
            argv.append("--verbose")  # stream-json in print mode requires it
        if model and "--model" not in argv:
            argv += ["--model", model]
        if resume:
            argv += ["--resume", resume]
    elif dialect == "codex":
        if "exec" not in argv:
            argv.insert(1, "exec")
        if "--json" not in argv:
            argv.append("--json")
        if "--skip-git-repo-check" not in argv:
            argv.append("--skip-git-repo-check")  # `flowd roster check` runs in a plain temp dir
        if model and "--model" not in argv and "-m" not in argv:
            argv += ["--model", model]
        if confined:
            argv = unsandboxed_codex(argv)
    return argv


def unsandboxed_codex(argv: list[str]) -> list[str]:
    """`codex exec` with `--sandbox danger-full-access`: inside flowd's Landlock, codex's own
    sandbox (bubblewrap: user namespaces and mounts, which a Landlock domain may not make)
    cannot start and every command it runs fails; the lane's confinement takes its place
    (docs/sandbox.md "Agents' own sandboxes")."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in ("--sandbox", "-s"):
            skip = True
            continue
        if word.startswith("--sandbox="):
            continue
        out.append(word)
    return [*out, "--sandbox", "danger-full-access"]


# --- the pure event fold -------------------------------------------------------------------------


@dataclass
class CliTurn:
    """What a turn's event lines add up to."""

    texts: list[str] = field(default_factory=list)
    final: str | None = None  # claude's `result.result`: the answer as the agent gives it
    usage: TurnUsage | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    session: str | None = None
    model: str | None = None
    stop_reason: str = "end_turn"

    @property
    def text(self) -> str:
        if self.final is not None:
            return self.final
        return self.texts[-1] if self.texts else ""


def fold_line(turn: CliTurn, line: bytes | str) -> list[ToolCall | str]:
    """Add one output line to `turn`; returns what an observer should see (tool calls, text)."""
    try:
        event = jsonl.loads(line)
    except jsonl.JSONError:
        return []  # CLIs print the odd banner; only JSON lines are events
    if not isinstance(event, dict):
        return []
    kind = event.get("type")
    if kind in ("system", "assistant", "user", "result"):
        return _fold_claude(turn, kind, event)
    if isinstance(kind, str):
        return _fold_codex(turn, kind, event)
    return []


def _fold_claude(turn: CliTurn, kind: str, event: dict[str, Any]) -> list[ToolCall | str]:
    seen: list[ToolCall | str] = []
    if kind == "system":
        turn.session = _str(event.get("session_id")) or turn.session
        turn.model = _str(event.get("model")) or turn.model
    elif kind == "assistant":
        message = event.get("message") or {}
        parent = _str(event.get("parent_tool_use_id"))
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if parent is None:  # a sub-agent's words are not the answer
                    turn.texts.append(block["text"])
                seen.append(block["text"])
            elif block.get("type") == "tool_use":
                call = ToolCall(tool=str(block.get("name", "tool")), args=block.get("input"), parent=parent)
                turn.tool_calls.append(call)
                seen.append(call)
    elif kind == "result":
        turn.session = _str(event.get("session_id")) or turn.session
        text = _str(event.get("result"))
        if event.get("is_error") or str(event.get("subtype", "success")) != "success":
            turn.errors.append(text or str(event.get("subtype")))
            if event.get("subtype") == "error_max_turns":
                turn.stop_reason = "max_turn_requests"
        elif text is not None:
            turn.final = text
        turn.usage = claude_usage(event)
        if turn.usage is not None and turn.usage.model:
            turn.model = turn.usage.model
    return seen


def claude_usage(result: dict[str, Any]) -> TurnUsage | None:
    """Usage of a claude `result` event: `modelUsage` summed (sub-agents included), else `usage`.

    Anthropic reports cache reads and writes apart from `input_tokens`; flowd's `input` counts
    them all.
    """
    cost = result.get("total_cost_usd")
    cost_usd = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    per_model = result.get("modelUsage")
    if isinstance(per_model, dict) and per_model:
        fresh = out = read = write = 0
        for entry in per_model.values():
            if isinstance(entry, dict):
                fresh += _n(entry.get("inputTokens"))
                out += _n(entry.get("outputTokens"))
                read += _n(entry.get("cacheReadInputTokens"))
                write += _n(entry.get("cacheCreationInputTokens"))
        model = next(iter(per_model)) if len(per_model) == 1 else None
        return TurnUsage(fresh + read + write, out, read, write, cost_usd, model)
    usage = result.get("usage")
    if isinstance(usage, dict):
        fresh = _n(usage.get("input_tokens"))
        read = _n(usage.get("cache_read_input_tokens"))
        write = _n(usage.get("cache_creation_input_tokens"))
        return TurnUsage(fresh + read + write, _n(usage.get("output_tokens")), read, write, cost_usd, None)
    return None


def _codex_tool_call(itype: object, item: dict[str, Any]) -> ToolCall | None:
    """The tool call a completed `codex exec` item is, or None when it is not one."""
    if itype == "command_execution":
        return ToolCall(
            tool="command_execution",
            args={"command": item.get("command"), "exitCode": item.get("exit_code")},
        )
    if itype == "file_change":
        return ToolCall(tool="file_change", args={"changes": item.get("changes")})
    if itype == "mcp_tool_call":
        name = f"{item.get('server', 'mcp')}.{item.get('tool', 'tool')}"
        return ToolCall(tool=name, args=item.get("arguments"))
    if itype == "web_search":
        return ToolCall(tool="web_search", args={"query": item.get("query")})
    return None


def _fold_codex(turn: CliTurn, kind: str, event: dict[str, Any]) -> list[ToolCall | str]:
    seen: list[ToolCall | str] = []
    if kind == "thread.started":
        turn.session = _str(event.get("thread_id")) or turn.session
    elif kind == "item.completed":
        item = event.get("item") or {}
        itype = item.get("type") if isinstance(item, dict) else None
        if itype == "agent_message" and isinstance(item.get("text"), str):
            turn.texts.append(item["text"])
            seen.append(item["text"])
        elif (call := _codex_tool_call(itype, item)) is not None:
            turn.tool_calls.append(call)
            seen.append(call)
        elif itype == "error" and isinstance(item.get("message"), str):
            # codex reports warnings this way ("Model metadata for `…` not found"); a failed
            # turn comes as `turn.failed` or a top-level `error` event.
            turn.warnings.append(item["message"])
    elif kind == "turn.completed":
        usage = event.get("usage")
        if isinstance(usage, dict):
            cached = usage.get("cached_input_tokens")
            # OpenAI semantics: input_tokens already includes the cached ones.
            turn.usage = TurnUsage(
                input=_n(usage.get("input_tokens")),
                output=_n(usage.get("output_tokens")),
                cached_read=_n(cached) if cached is not None else None,
                model=turn.model,
            )
    elif kind == "turn.failed":
        error = event.get("error")
        turn.errors.append((_str(error.get("message")) if isinstance(error, dict) else None) or "turn failed")
    elif kind == "error":
        turn.errors.append(_str(event.get("message")) or "error")
    return seen


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _n(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- the process ---------------------------------------------------------------------------------


class CliExecutor:
    """Spawns the CLI once per turn; keeps claude's session id to resume the same conversation."""

    def __init__(self, spec: ExecutorSpec, *, clone: int = 1, log_dir: Path | None = None) -> None:
        if not spec.command:
            raise ValueError(f"executor {spec.id}: kind 'cli' needs a command")
        self.spec = spec
        self.clone = clone
        self._log = log_dir / f"{spec.id}-{clone}.cli.log" if log_dir is not None else None
        self._proc: asyncio.subprocess.Process | None = None
        self._sessions: dict[tuple[str, ...], str] = {}
        self._version_checked = False

    async def run_turn(self, request: TurnRequest, observe: TurnObserver | None = None) -> TurnResult:
        assert self.spec.command is not None
        key = (str(request.cwd), request.role, request.meta.story or "", request.meta.task or "")
        resume = self._sessions.get(key) if dialect_of(self.spec.command) == "claude" else None
        confinement = current()
        confined = confinement is not None and confinement.key_for(request.cwd) is not None
        argv = build_argv(self.spec.command, model=self.spec.model, resume=resume, confined=confined)
        if not self._version_checked:
            await self._check_version()
        try:
            turn = await asyncio.wait_for(self._run(argv, request, observe), timeout=request.turn_timeout_s)
        except TimeoutError:
            await self._kill()
            raise AgentError("timeout", f"{self.spec.id} did not finish within {request.turn_timeout_s:g}s")
        except asyncio.CancelledError:
            await self._kill()
            raise
        if turn.session:
            self._sessions[key] = turn.session
        return TurnResult(
            text=turn.text,
            usage=turn.usage,
            tool_calls=turn.tool_calls,
            stop_reason=turn.stop_reason,
            model=turn.model or self.spec.model,
        )

    async def _check_version(self) -> None:
        """A known CLI older than flowd runs fails its first turn in one sentence (docs/roster.md)."""
        assert self.spec.command is not None
        program = program_of("cli", self.spec.command)
        if program is not None:
            env = cli_environment(self.spec.resolved_env)
            old = too_old(
                program, await cli_version(self.spec.command[0], env), f"{self.spec.id}#{self.clone}"
            )
            if old is not None:
                raise AgentError("auth", old)
        self._version_checked = True

    async def _run(self, argv: list[str], request: TurnRequest, observe: TurnObserver | None) -> CliTurn:
        # One process per turn: the lane's FLOWD_* variables can be in its own environment.
        env = {**cli_environment(self.spec.resolved_env), **(request.meta.env or {})}
        argv = await npx.for_lane(argv, env)
        try:
            with spawning(request.cwd, program_key("cli", self.spec.command), env) as confined:
                proc = await start_process(  # a cancel meanwhile stops it, started
                    *confined.argv(reaped(argv, env.get("PATH"))),
                    cwd=request.cwd,
                    env={**env, **confined.env},
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    limit=_LINE_LIMIT,
                    start_new_session=True,  # its own process group: a kill reaches its children too
                    preexec_fn=confined.preexec_fn,  # confined to the turn's lane (docs/sandbox.md)
                    pass_fds=confined.pass_fds,
                )
        except OSError as exc:
            raise AgentError("unavailable", f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
        self._proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr_tail: deque[str] = deque(maxlen=_STDERR_KEEP)
        scanner = Scanner(current(), request.cwd, f"its agent {self.spec.id}#{self.clone}")
        drain = asyncio.create_task(self._drain(proc.stderr, stderr_tail, scanner))
        turn = CliTurn()
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(request.prompt.encode())
                await proc.stdin.drain()
                proc.stdin.close()
            while True:
                try:
                    line = await asyncio.wait_for(proc.stdout.readline(), timeout=request.stall_timeout_s)
                except TimeoutError:
                    await self._kill()
                    raise AgentError(
                        "stall", f"{self.spec.id} printed nothing for {request.stall_timeout_s:g}s"
                    ) from None
                if not line:
                    break
                self._write_log(line)
                scanner.feed_json(line)  # its tools' output, where the OS's refusals show
                for seen in fold_line(turn, line):
                    if observe is not None:
                        observe(seen)
            code = await proc.wait()
            await drain
        finally:
            # Cancelled or timed out mid-turn (or failed reading): nothing of the agent may linger.
            await self._kill()
            if not drain.done():
                drain.cancel()
            self._proc = None
        if code != 0 or turn.errors:
            # Each thing said once (codex repeats its error as an event and on stderr).
            said = list(dict.fromkeys([*turn.errors, *list(stderr_tail)[-5:]]))
            message = "; ".join(said).strip() or f"exited with code {code}"
            kind, reset = classify(message, exit_code=code if code != 0 else None)
            raise AgentError(kind, f"{self.spec.id}#{self.clone}: {worded(message)}", reset_at=reset)
        return turn

    async def _drain(self, stream: asyncio.StreamReader, tail: deque[str], scanner: Scanner) -> None:
        """Read stderr as it comes: a full pipe would block the agent."""
        while True:
            line = await stream.readline()
            if not line:
                return
            self._write_log(b"stderr: " + line)
            scanner.feed(line)  # what the OS refused it (docs/sandbox.md "Refusals")
            text = line.decode("utf-8", "replace").strip()
            if text:
                tail.append(text)

    def _write_log(self, line: bytes) -> None:
        if self._log is not None:
            self._log.parent.mkdir(parents=True, exist_ok=True)
            with self._log.open("ab") as handle:
                handle.write(line if line.endswith(b"\n") else line + b"\n")

    async def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is not None:
            # What the CLI started and left behind in its group goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()

    async def cancel(self) -> None:
        await self._kill()

    async def close(self) -> None:
        await self._kill()
        self._sessions.clear()
