"""`AcpExecutor`: one clone's connection to an ACP agent process (docs/roster.md, docs/scripted-agent.md).

The process is started on the first turn and reused; a new session opens when the working
directory changes or the process was restarted. A turn is `session/prompt` carrying
`_meta.flowd`, watched by two clocks: the turn timeout, and the stall timeout (nothing heard from
the agent for that long). Either kills the process; the next turn starts a fresh one.

Things the SDK leaves to us (see the gotchas in the reference):
- stderr is drained into a log file (or dropped) so a chatty agent never blocks on a full pipe;
- the environment is built explicitly (a minimal base plus the roster's `env`), never inherited;
- `session_update` never awaits: updates are folded in arrival order;
- `usage_update.cost` is cumulative per session, so each turn records the difference;
- the agent runs in its own process group, so commands it started die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp import RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptResponse,
    ReadTextFileResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    WriteTextFileResponse,
)

from flowd import __version__
from flowd.agents.base import (
    AGENT_DEFAULT_ENV,
    AgentError,
    FailureKind,
    ToolCall,
    TurnObserver,
    TurnRequest,
    TurnResult,
    reaped,
)
from flowd.agents.faults import classify, worded
from flowd.agents.program_dirs import program_key
from flowd.agents.programs import program_named, too_old
from flowd.agents.usage import capture_usage, model_usages
from flowd.sandbox.confine import Confinement, Scanner, current, spawning, strings_in

log = logging.getLogger("flowd.agents.acp")

# What every agent gets from flowd's own environment; the roster's `env` goes on top. Secrets
# never come from here: they are passed only when the roster names them.
BASE_ENV_KEYS = (
    "PATH",
    "HOME",
    "LOGNAME",
    "USER",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "SYSTEMROOT",
    "FLOWD_SCRIPT_STATE",
)
_STDOUT_LIMIT = 50 * 1024 * 1024  # agents send whole files in one JSON line
_TAIL_BYTES = 8192
_FULL_ACCESS = "agent-full-access"  # codex-acp's session mode without its own sandbox
_SHUTDOWN_WAIT_S = 2.0
_PATH_KEYS = ("path", "file_path", "filePath", "notebook_path", "abs_path", "absolutePath")


def base_environment() -> dict[str, str]:
    return {**AGENT_DEFAULT_ENV, **{key: os.environ[key] for key in BASE_ENV_KEYS if key in os.environ}}


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


def error_text(exc: RequestError) -> str:
    """The JSON-RPC error's message with the agent's details, which carry the real wording."""
    text = str(exc)
    data = exc.data
    if isinstance(data, dict):
        for key in ("details", "message", "error"):
            if isinstance(data.get(key), str):
                return f"{text}: {data[key]}"
    if data is not None:
        return f"{text}: {json.dumps(data, default=str)[:500]}"
    return text


@dataclass
class _Turn:
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


class _Client:
    """The ACP client side the agent calls back into. `session_update` never awaits (order)."""

    def __init__(self, owner: AcpExecutor) -> None:
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


class AcpExecutor:
    """An `Executor` over one ACP agent process (kinds `acp` and `script`)."""

    def __init__(
        self,
        *,
        label: str,
        command: list[str],
        env: dict[str, str] | None = None,
        model: str | None = None,
        log_path: Path | None = None,
        cancel_grace_s: float = 5.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        if not command:
            raise ValueError("an ACP executor needs a command")
        self.label = label
        self._command = list(command)
        self._env = dict(env or {})
        self._model = model
        self._log_path = log_path
        self._cancel_grace_s = cancel_grace_s
        self._start_timeout_s = start_timeout_s
        self._client = _Client(self)
        self._proc: asyncio.subprocess.Process | None = None
        self._confined_to: str | None = None  # the lane worktree the process is confined to
        self._confinement: Confinement | None = None  # the run's, when the process started
        self._conn: Any = None
        self._drain: asyncio.Task[None] | None = None
        self._tail = bytearray()
        self._session: tuple[Path, str] | None = None
        self._sessions: dict[str, Path] = {}
        self._cost_base: dict[str, float] = {}
        self._turn: _Turn | None = None
        self._turn_lock = asyncio.Lock()
        self._last_heard = 0.0
        self._closed = False
        self._agent_name = ""  # `agentInfo.name` from `initialize`

    @property
    def pid(self) -> int | None:
        """The running agent process, if any (tests check it is gone after close)."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def run_turn(self, request: TurnRequest, observe: TurnObserver | None = None) -> TurnResult:
        async with self._turn_lock:
            if self._closed:
                raise AgentError("cancelled", f"{self.label}: the executor is closed")
            loop = asyncio.get_running_loop()
            self._last_heard = loop.time()
            cwd = request.cwd.resolve()
            if not cwd.is_dir():
                raise AgentError("error", f"{self.label}: the working directory {cwd} does not exist")
            # Starting a process (node, or Python importing acp) is not a stall: allow it a while.
            start_s = max(request.stall_timeout_s, self._start_timeout_s)
            try:
                session_id = await asyncio.wait_for(self._ensure_session(cwd), start_s)
            except TimeoutError:
                await self._stop(graceful=False)
                raise AgentError("stall", f"{self.label}: no answer while starting the agent")
            except asyncio.CancelledError:
                # A half-started agent is of no use to the next turn.
                await asyncio.shield(self._stop(graceful=False))
                raise
            turn = _Turn(session_id=session_id, cwd=cwd, observe=observe)
            self._turn = turn
            try:
                return await self._drive(turn, request)
            finally:
                self._turn = None
                turn.finished.set()

    async def warm(self, cwd: Path) -> None:
        """Start the agent process (and its `initialize`) ahead of the first turn, with `cwd` as
        the process's directory; the turn still opens its session in its own directory.

        Best effort (docs/performance.md: throughput): a failure or timeout stops the half-started
        process and is forgotten, so the first turn starts the agent again and reports whatever
        happens then, exactly as without the warm start. Agents whose clones must start one after
        another (codex: its first session is part of its start) are left to their first turn."""
        if _starts_alone(self._command):
            return
        async with self._turn_lock:
            if self._closed or (
                self._proc is not None and self._proc.returncode is None and self._conn is not None
            ):
                return
            try:
                await asyncio.wait_for(self._start(cwd), self._start_timeout_s)
            except (AgentError, TimeoutError, OSError):
                await self._stop(graceful=False)
            except asyncio.CancelledError:
                await asyncio.shield(self._stop(graceful=False))
                raise
            if self._closed:  # closed while starting: nothing may outlive close()
                await self._stop(graceful=False)

    async def cancel(self) -> None:
        """Ask the agent to stop the turn in flight; kill it if it does not within the grace."""
        turn, conn = self._turn, self._conn
        if turn is None:
            return
        turn.cancelled = True
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.cancel(session_id=turn.session_id)
        try:
            await asyncio.wait_for(turn.finished.wait(), self._cancel_grace_s)
        except TimeoutError:
            await self._stop(graceful=False)
            await turn.finished.wait()

    async def close(self) -> None:
        self._closed = True
        if self._turn is not None:
            self._turn.cancelled = True
        await self._stop(graceful=True)

    # -- the turn -------------------------------------------------------------------------------

    async def _drive(self, turn: _Turn, request: TurnRequest) -> TurnResult:
        loop = asyncio.get_running_loop()
        proc, conn = self._proc, self._conn
        assert proc is not None and conn is not None
        prompt = asyncio.ensure_future(
            conn.prompt(
                session_id=turn.session_id,
                prompt=[acp.text_block(request.prompt)],
                flowd=request.meta.wire(),
            )
        )
        deadline = loop.time() + request.turn_timeout_s
        try:
            while not prompt.done():
                now = loop.time()
                limit = min(deadline, self._last_heard + request.stall_timeout_s)
                if now >= limit:
                    await self._abandon(prompt)
                    if turn.cancelled:
                        raise AgentError("cancelled", f"{self.label}: the turn was cancelled")
                    if now >= deadline:
                        raise AgentError("timeout", f"{self.label}: no answer in {request.turn_timeout_s:g}s")
                    raise AgentError(
                        "stall",
                        f"{self.label}: nothing heard from the agent for {request.stall_timeout_s:g}s",
                    )
                await asyncio.wait({prompt}, timeout=limit - now)
            response: PromptResponse = prompt.result()
        except asyncio.CancelledError:
            await asyncio.shield(self._abandon(prompt))
            raise
        except RequestError as exc:
            if turn.cancelled:
                raise AgentError("cancelled", f"{self.label}: the turn was cancelled")
            text = error_text(exc)
            kind, reset_at = classify(text)
            if exc.code == -32000:
                kind = "auth"  # ACP's authRequired: claude's "Please run /login"
            raise AgentError(kind, f"{self.label}: {worded(text)}", reset_at=reset_at)
        except (ConnectionError, OSError):
            raise await self._died(proc, turn)
        if response.stop_reason == "cancelled" or turn.cancelled:
            raise AgentError("cancelled", f"{self.label}: the turn was cancelled")
        failure = turn.failure()
        if failure is not None:
            kind, reset_at = classify(failure)
            raise AgentError(kind, f"{self.label}: {worded(failure)}", reset_at=reset_at)
        return self._result(turn, response)

    def _result(self, turn: _Turn, response: PromptResponse) -> TurnResult:
        turn.flush_tools()
        per_model = model_usages(response.field_meta or {})
        usage = per_model[0] if per_model else capture_usage(response)
        more = per_model[1:]
        if turn.cost_seen is not None:
            previous = self._cost_base.get(turn.session_id, 0.0)
            self._cost_base[turn.session_id] = turn.cost_seen
            # A smaller cumulative figure means the agent started counting afresh.
            delta = turn.cost_seen - previous if turn.cost_seen >= previous else turn.cost_seen
            if usage is not None:
                usage.cost_usd = round(delta, 10)
                for other in more:
                    other.cost_usd = 0.0  # the agent's figure covers every model of the turn
        model = (usage.model if usage is not None else None) or self._model
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

    async def _abandon(self, prompt: asyncio.Future[Any]) -> None:
        await self._stop(graceful=False)
        prompt.cancel()
        with contextlib.suppress(BaseException):
            await prompt

    async def _died(self, proc: asyncio.subprocess.Process, turn: _Turn) -> AgentError:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), _SHUTDOWN_WAIT_S)
        code = proc.returncode
        tail = self._tail_text()
        await self._stop(graceful=False)
        if turn.cancelled:
            return AgentError("cancelled", f"{self.label}: the turn was cancelled")
        # Only its last words: agents like claude log everything to stderr, old errors included.
        last = "\n".join(tail.strip().splitlines()[-5:])
        kind, reset_at = classify(last, exit_code=code if code is not None else -1)
        detail = f": {last.splitlines()[-1]}" if last else ""
        return AgentError(
            kind, f"{self.label}: the agent exited (code {code}) mid-turn{detail}", reset_at=reset_at
        )

    # -- process and session ----------------------------------------------------------------------

    async def _ensure_session(self, cwd: Path) -> str:
        confinement = current()
        if (
            self._proc is not None
            and confinement is not None
            and confinement.key_for(cwd) != self._confined_to
        ):
            # A process confined to one lane cannot serve another: start one for this lane.
            await self._stop(graceful=True)
        if self._proc is None or self._proc.returncode is not None or self._conn is None:
            if not _starts_alone(self._command):
                await self._start(cwd)
                return await self._open_session(cwd)
            # codex sets up its state database under CODEX_HOME when it starts (and opens its
            # first session): two clones at once fail, so they start one after another.
            async with _start_lock(self.label):
                await self._start(cwd)
                return await self._open_session(cwd)
        return await self._open_session(cwd)

    async def leave_lane(self, worktree: Path) -> bool:
        """Stop the agent process when it is confined to the lane worktree `worktree` and idle:
        that folder is about to be handed to another lane (docs/repositories.md "Worktree
        reuse"), whose processes must be confined to it alone. Returns whether it stopped one."""
        prefix = f"{os.path.realpath(worktree)}@"
        if self._confined_to is None or not self._confined_to.startswith(prefix) or self._turn_lock.locked():
            return False
        async with self._turn_lock:
            if self._confined_to is None or not self._confined_to.startswith(prefix):
                return False
            await self._stop(graceful=True)
            self._confined_to = None
        return True

    async def _open_session(self, cwd: Path) -> str:
        if self._conn is None:  # closed while starting
            raise AgentError("cancelled", f"{self.label}: the executor was closed")
        if self._session is not None and self._session[0] == cwd:
            return self._session[1]
        try:
            response = await self._conn.new_session(cwd=str(cwd), mcp_servers=[], **self._session_meta())
            await self._apply_model(response)
            await self._unsandbox(response)
            await self._name_session(str(response.session_id), cwd)
        except RequestError as exc:
            text = error_text(exc)
            kind, reset_at = classify(text)
            raise AgentError(
                "auth" if exc.code == -32000 else kind, f"{self.label}: {text}", reset_at=reset_at
            )
        except (ConnectionError, OSError):
            raise await self._start_failed()
        session_id = str(response.session_id)
        self._session = (cwd, session_id)
        self._sessions[session_id] = cwd
        return session_id

    async def _unsandbox(self, response: Any) -> None:
        """In a confined lane, codex-acp runs its commands in its full-access mode: its own
        sandbox (bubblewrap) cannot start inside a Landlock domain, which may not mount, and
        the lane's confinement takes its place (docs/sandbox.md "Agents' own sandboxes")."""
        if self._conn is None or self._confined_to is None or "codex-acp" not in self._agent_name:
            return
        modes = getattr(response, "modes", None)
        offered = {str(getattr(m, "id", "")) for m in getattr(modes, "available_modes", None) or []}
        if _FULL_ACCESS in offered:
            await self._conn.set_session_mode(session_id=str(response.session_id), mode_id=_FULL_ACCESS)

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
            await self._conn._conn.send_request(
                "session/set_title", {"sessionId": session_id, "title": f"flowd {cwd.name}"}
            )

    async def _set_model(self, session_id: str) -> None:
        """ACP's `session/set_model` (gemini: a fixed model also stops its routing requests)."""
        try:
            await self._conn._conn.send_request(
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
        if not self._model or self._conn is None:
            return
        if "claude-agent-acp" in self._agent_name:
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
            await self._conn.set_config_option(
                config_id="model", session_id=str(response.session_id), value=self._model
            )
        except RequestError as exc:
            raise self._model_error(exc, ", ".join(_option_values(option)[:8]) or "none listed") from None

    async def _start(self, cwd: Path) -> None:
        await self._stop(graceful=False)
        self._tail.clear()
        env = {**base_environment(), **self._env}
        try:
            argv = reaped(self._command, env.get("PATH"))
        except AgentError as exc:
            raise AgentError(exc.kind, f"{self.label}: {exc.message}") from None
        try:
            # Confined to the lane of `cwd` for its whole life (docs/sandbox.md).
            with spawning(cwd, program_key("acp", self._command), env) as confined:
                proc = await asyncio.create_subprocess_exec(
                    *confined.argv(argv),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env={**env, **confined.env},
                    cwd=str(cwd),
                    limit=_STDOUT_LIMIT,
                    start_new_session=True,
                    preexec_fn=confined.preexec_fn,
                    pass_fds=confined.pass_fds,
                )
            self._confined_to = confined.key
            self._confinement = current()
        except OSError as exc:
            raise AgentError(
                "unavailable", f"{self.label}: cannot start {self._command[0]}: {exc.strerror or exc}"
            )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self._drain = asyncio.create_task(
            self._drain_stderr(proc.stderr, Scanner(current(), cwd, f"its agent {self.label}"))
        )
        self._conn = acp.connect_to_agent(
            cast(acp.Client, self._client), proc.stdin, proc.stdout, observers=[self._heard]
        )
        try:
            init = await self._conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                # No `fs/read_text_file`: gemini (0.61) rejects a client's error as a plain object
                # its not-found check never matches, so a read of a file still to be created fails
                # its write; read natively, it sees ENOENT. Writes still come here (path checks).
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=True), terminal=False
                ),
                client_info=Implementation(name="flowd", title="flowd", version=__version__),
            )
        except RequestError as exc:
            text = error_text(exc)
            kind, reset_at = classify(text)
            await self._stop(graceful=False)
            raise AgentError(
                "auth" if exc.code == -32000 else kind, f"{self.label}: {text}", reset_at=reset_at
            )
        except (ConnectionError, OSError):
            raise await self._start_failed()
        info = init.agent_info
        self._agent_name = info.name if info is not None else ""
        program = program_named(self._agent_name)
        old = too_old(program, info.version or "", self.label) if program and info else None
        if old is not None:
            await self._stop(graceful=False)
            raise old

    async def _start_failed(self) -> AgentError:
        proc = self._proc
        code = None
        if proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _SHUTDOWN_WAIT_S)
            code = proc.returncode
        tail = self._tail_text()
        await self._stop(graceful=False)
        kind, reset_at = classify(tail)
        if kind == "error":
            kind = "unavailable"  # it never got as far as a turn: the engine cannot be used now
        detail = f": {tail.strip().splitlines()[-1]}" if tail.strip() else ""
        return AgentError(
            kind, f"{self.label}: the agent did not start (exit code {code}){detail}", reset_at=reset_at
        )

    async def _stop(self, *, graceful: bool) -> None:
        """End the process (stdin close → SIGTERM → SIGKILL, its whole group) and forget the session."""
        proc, conn, drain = self._proc, self._conn, self._drain
        self._proc, self._conn, self._drain, self._session = None, None, None, None
        if proc is not None and graceful and proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _SHUTDOWN_WAIT_S)
        if proc is not None:
            if proc.returncode is None and graceful:
                _signal_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), _SHUTDOWN_WAIT_S)
            if proc.returncode is None:
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
            # Commands the agent started may outlive it in its group.
            _signal_group(proc.pid, signal.SIGKILL)
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), _SHUTDOWN_WAIT_S)
        if drain is not None:
            try:
                await asyncio.wait_for(drain, _SHUTDOWN_WAIT_S)
            except (TimeoutError, asyncio.CancelledError):
                drain.cancel()

    async def _drain_stderr(self, stream: asyncio.StreamReader, scanner: Scanner) -> None:
        sink = None
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
                sink = open(self._log_path, "ab")  # noqa: SIM115 - closed below, lives as long as the process
        try:
            while chunk := await stream.read(65536):
                self._tail += chunk
                del self._tail[:-_TAIL_BYTES]
                scanner.feed(chunk)  # the scripted agent's commands say what the OS refused here
                if sink is not None:
                    sink.write(chunk)
                    sink.flush()
        finally:
            if sink is not None:
                sink.close()

    def _tail_text(self) -> str:
        return bytes(self._tail).decode("utf-8", errors="replace")

    # -- callbacks from the agent ---------------------------------------------------------------

    def _heard(self, event: StreamEvent) -> None:
        if event.direction == StreamDirection.INCOMING:
            self._last_heard = asyncio.get_running_loop().time()

    def _on_update(self, session_id: str, update: Any) -> None:
        turn = self._turn
        if turn is None or session_id != turn.session_id:
            return  # e.g. available_commands_update after session/new: nothing to record
        if isinstance(update, (ToolCallStart, ToolCallProgress)) and self._confinement is not None:
            # A refusal the OS made to the agent's own tool (its shell) is told in the tool's
            # output, not on the agent's stderr (docs/sandbox.md "Refusals").
            self._confinement.scan(tool_output_text(update), turn.cwd, f"its agent {self.label}")
        if isinstance(update, AgentMessageChunk):
            if _is_notice(update.field_meta):
                log.info("%s: agent notice: %s", self.label, getattr(update.content, "text", ""))
            elif isinstance(update.content, TextContentBlock):
                text = update.content.text
                if update.message_id and turn.message_id and update.message_id != turn.message_id:
                    text = "\n\n" + text
                turn.message_id = update.message_id or turn.message_id
                turn.chunks.append((update.message_id, text))
                turn.emit(text)
        elif isinstance(update, ToolCallStart):
            call = ToolCall(
                tool=_tool_name(update), args=_tool_args(update), parent=_parent(update.field_meta)
            )
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
            isinstance(update, UsageUpdate)
            and update.cost is not None
            and update.cost.currency.upper() == "USD"
        ):
            turn.cost_seen = float(update.cost.amount)

    def _on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        turn = self._turn
        cwd = self._sessions.get(session_id)
        if turn is None or turn.cancelled or cwd is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if tool_call.tool_call_id not in turn.known or tool_call.tool_call_id in turn.pending:
            # gemini asks before it announces the call: the request is the call's only trace.
            call = turn.pending.get(tool_call.tool_call_id) or ToolCall(
                tool=_tool_name(tool_call), args=_tool_args(tool_call)
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
            log.info("%s: refused %s (outside %s)", self.label, title, cwd)
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice.option_id)
        )

    def _checked_path(self, session_id: str, path: str, action: str) -> str:
        cwd = self._sessions.get(session_id)
        if cwd is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        if not os.path.isabs(path):
            raise RequestError.invalid_params({"path": path, "reason": "path must be absolute"})
        if outside(cwd, path):
            if self._turn is not None:
                self._turn.refusals.append(f"{action} {path}: outside the working directory {cwd}")
            raise RequestError.invalid_params({"path": path, "reason": "outside the working directory"})
        return os.path.realpath(path)


_START_LOCKS: dict[tuple[int, str], asyncio.Lock] = {}


def _starts_alone(command: list[str]) -> bool:
    """Agents whose clones must not start at the same time (codex-acp, codex)."""
    return any(Path(part).name.startswith("codex") for part in command[:3])


def _start_lock(label: str) -> asyncio.Lock:
    """One lock per executor (the label without its clone number) and event loop."""
    key = (id(asyncio.get_running_loop()), label.rsplit("#", 1)[0])
    return _START_LOCKS.setdefault(key, asyncio.Lock())


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


def _note_status(turn: _Turn, meta: dict[str, Any] | None) -> None:
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


def _tool_name(update: ToolCallStart | ToolCallUpdate) -> str:
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


def _tool_args(update: ToolCallStart | ToolCallUpdate) -> Any:
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


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


__all__ = ["AcpExecutor", "FailureKind", "base_environment", "capture_usage", "outside", "tool_paths"]
