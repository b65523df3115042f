"""`AcpExecutor`: one clone's connection to an ACP agent process (docs/roster.md, docs/scripted-agent.md).

The process is started on the first turn and reused; a new session opens when the working
directory changes or the process was restarted. A turn is `session/prompt` carrying
`_meta.flowd`, watched by two clocks: the turn timeout, and the stall timeout (nothing heard from
the agent for that long). Either kills the process; the next turn starts a fresh one.

The parts: the process (`acp_process.py`), opening a session (`acp_session.py`), the turn's
accumulation (`acp_turn.py`), what the agent may touch through flowd (`acp_access.py`); the
executor drives turns over them.
`session_update` never awaits: updates are folded in arrival order; `usage_update.cost` is
cumulative per session, so each turn records the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import acp
from acp import RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from flowd.agents.acp_access import AcpClient, checked_path, permission
from flowd.agents.acp_late import SETTLE_WAIT_S, SessionBill, note_update, settle
from flowd.agents.acp_process import (
    SHUTDOWN_WAIT_S,
    AgentProcess,
    error_text,
    start_lock,
    starts_alone,
)
from flowd.agents.acp_session import SessionOpener
from flowd.agents.acp_turn import Turn, fold_update, tool_output_text, turn_result
from flowd.agents.base import AgentError, LateUsageSink, TurnObserver, TurnRequest, TurnResult
from flowd.agents.faults import classify, worded
from flowd.programs.table import program_named
from flowd.sandbox.confine import current

log = logging.getLogger("flowd.agents.acp")


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
        self._client = AcpClient(self)
        self._agent = AgentProcess(
            label=label,
            command=self._command,
            env=self._env,
            log_path=log_path,
            client=self._client,
            heard=self._heard,
        )
        self._opener = SessionOpener(self._agent, label=label, model=model)
        self._session: tuple[Path, str] | None = None
        self._sessions: dict[str, Path] = {}
        self._cost_base: dict[str, float] = {}
        # Each open session's turn that opened it, for the usage it spends after its last answer
        # (acp_late.py); billed through `_late_sink` when the session ends.
        self._bills: dict[str, SessionBill] = {}
        self._late_sink: LateUsageSink | None = None
        self._turn: Turn | None = None
        self._turn_lock = asyncio.Lock()
        self._last_heard = 0.0
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The running agent process, if any (tests check it is gone after close)."""
        proc = self._agent.proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def bill_late_to(self, sink: LateUsageSink) -> None:
        """Where usage reported after its turn goes (docs/roster.md "Side requests")."""
        self._late_sink = sink

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
            turn = Turn(session_id=session_id, cwd=cwd, observe=observe)
            self._turn = turn
            bill = self._bills.setdefault(session_id, SessionBill(cause=request))
            try:
                result = await self._drive(turn, request)
                bill.answered = True
                return result
            finally:
                self._turn = None
                turn.finished.set()

    async def warm(self, cwd: Path) -> None:
        """Start the agent process (and its `initialize`) ahead of the first turn, with `cwd` as
        the process's directory; the turn still opens its session in its own directory.

        Best effort (docs/performance.md: throughput): a failure or timeout stops the half-started
        process and is forgotten, so the first turn starts the agent again and reports whatever
        happens then, exactly as without the warm start. Agents whose clones must start one after
        another (codex: its first session is part of its start) are left to their first turn. A
        process confined to another lane than `cwd`'s is replaced (docs/sandbox.md)."""
        if starts_alone(self._command):
            return
        async with self._turn_lock:
            if self._closed or (self._agent.running and not self._confined_elsewhere(cwd)):
                return
            if self._confined_elsewhere(cwd):  # idle, and of no use to the lane it will serve
                await self._stop(graceful=True)
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
        turn, conn = self._turn, self._agent.conn
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

    async def _drive(self, turn: Turn, request: TurnRequest) -> TurnResult:
        loop = asyncio.get_running_loop()
        proc, conn = self._agent.proc, self._agent.conn
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
        return turn_result(turn, response, self._cost_base, self._model)

    async def _abandon(self, prompt: asyncio.Future[Any]) -> None:
        await self._stop(graceful=False)
        prompt.cancel()
        with contextlib.suppress(BaseException):
            await prompt

    async def _died(self, proc: asyncio.subprocess.Process, turn: Turn) -> AgentError:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), SHUTDOWN_WAIT_S)
        code = proc.returncode
        tail = self._agent.tail_text()
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
        if self._confined_elsewhere(cwd):
            # A process confined to one lane cannot serve another: start one for this lane.
            await self._stop(graceful=True)
        if not self._agent.running:
            if not starts_alone(self._command):
                await self._start(cwd)
                return await self._open_session(cwd)
            # codex sets up its state database under CODEX_HOME when it starts (and opens its
            # first session): two clones at once fail, so they start one after another.
            async with start_lock(self.label):
                await self._start(cwd)
                return await self._open_session(cwd)
        return await self._open_session(cwd)

    def _confined_elsewhere(self, cwd: Path) -> bool:
        """The running process is confined to another lane than `cwd`'s (docs/sandbox.md)."""
        confinement = current()
        return (
            self._agent.proc is not None
            and confinement is not None
            and confinement.key_for(cwd) != self._agent.confined_to
        )

    async def leave_lane(self, worktree: Path) -> bool:
        """Stop the agent process when it is confined to the lane worktree `worktree` and idle:
        that folder is about to be handed to another lane (docs/repositories.md "Worktree
        reuse"), whose processes must be confined to it alone. Returns whether it stopped one."""
        prefix = f"{os.path.realpath(worktree)}@"
        confined = self._agent.confined_to
        if confined is None or not confined.startswith(prefix) or self._turn_lock.locked():
            return False
        async with self._turn_lock:
            confined = self._agent.confined_to
            if confined is None or not confined.startswith(prefix):
                return False
            await self._stop(graceful=True)
            self._agent.confined_to = None
        return True

    async def _open_session(self, cwd: Path) -> str:
        conn = self._agent.conn
        if conn is None:  # closed while starting
            raise AgentError("cancelled", f"{self.label}: the executor was closed")
        if self._session is not None and self._session[0] == cwd:
            return self._session[1]
        await self._settle()  # the session this one replaces has ended
        try:
            session_id = await self._opener.open(conn, cwd)
        except (ConnectionError, OSError):
            raise await self._start_failed()
        self._session = (cwd, session_id)
        self._sessions[session_id] = cwd
        return session_id

    async def _start(self, cwd: Path) -> None:
        self._session = None  # a new process knows no session
        await self._agent.start(cwd)

    async def _start_failed(self) -> AgentError:
        self._session = None
        return await self._agent.start_failed()

    async def _stop(self, *, graceful: bool) -> None:
        """End the process and forget its session; a graceful stop settles the session first."""
        if graceful:
            await self._settle()
        self._session = None
        self._bills.clear()  # a process's sessions end with it
        await self._agent.stop(graceful=graceful)

    async def _settle(self) -> None:
        """Bill what the current session spent after its last answer (a title that finished
        late), before the session ends: agents/acp_late.py. Only for programs with a usage
        probe, and never beside a turn in flight (its process is being torn down)."""
        session, conn = self._session, self._agent.conn
        if session is None or conn is None or self._turn is not None or not self._agent.running:
            return
        bill = self._bills.pop(session[1], None)
        program = program_named(self._agent.agent_name)
        if bill is None or program is None or program.usage_probe is None:
            return
        late = await settle(conn, session[1], bill, program.usage_probe, SETTLE_WAIT_S)
        if late is not None and self._late_sink is not None:
            try:
                self._late_sink(late)
            except Exception:  # a sink's bug must not stop the agent's shutdown
                log.exception("%s: billing usage after a turn failed", self.label)

    # -- callbacks from the agent ---------------------------------------------------------------

    def _heard(self, event: StreamEvent) -> None:
        if event.direction == StreamDirection.INCOMING:
            self._last_heard = asyncio.get_running_loop().time()

    def _on_update(self, session_id: str, update: Any) -> None:
        note_update(self._bills.get(session_id), update)  # between turns too (acp_late.py)
        turn = self._turn
        if turn is None or session_id != turn.session_id:
            return  # e.g. available_commands_update after session/new: nothing to record
        confinement = self._agent.confinement
        if isinstance(update, (ToolCallStart, ToolCallProgress)) and confinement is not None:
            # A refusal the OS made to the agent's own tool (its shell) is told in the tool's
            # output, not on the agent's stderr (docs/sandbox.md "Refusals").
            confinement.scan(tool_output_text(update), turn.cwd, f"its agent {self.label}")
        fold_update(turn, update, self.label)

    def _on_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> RequestPermissionResponse:
        return permission(self._turn, self._sessions.get(session_id), tool_call, options, self.label)

    def _checked_path(self, session_id: str, path: str, action: str) -> str:
        return checked_path(self._sessions.get(session_id), session_id, path, action, self._turn)
