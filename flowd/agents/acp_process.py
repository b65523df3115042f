"""One ACP agent process: started with an explicit environment, confined to its lane, its stderr
drained, `initialize`d; stopped with its whole process group (docs/roster.md, docs/sandbox.md).

Things the SDK leaves to us (see the gotchas in the reference):
- stderr is drained into a log file (or dropped) so a chatty agent never blocks on a full pipe;
- the environment is built explicitly (a minimal base plus the roster's `env`), never inherited;
- the agent runs in its own process group, so commands it started die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import acp
from acp import RequestError
from acp.connection import StreamEvent
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from flowd import __version__
from flowd.agents import npx
from flowd.agents.base import AGENT_DEFAULT_ENV, AgentError, reaped
from flowd.agents.faults import classify
from flowd.base.process_start import start_process
from flowd.programs.state_dirs import program_key
from flowd.programs.table import program_named, too_old
from flowd.sandbox.confine import Confinement, Scanner, current, spawning

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
SHUTDOWN_WAIT_S = 2.0
# Agent starts under way at once, across every clone of the run (docs/performance.md "Agent
# starts"): a start is mostly CPU (an interpreter or node loading its SDK), so more than the cores
# only makes every start late. The gate is first come, first served, and the scheduler starts the
# stories on the longest chains first, so theirs are not held up by the others'.
START_PARALLEL = max(2, os.cpu_count() or 2)
_start_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def start_slot() -> AsyncIterator[None]:
    """One of the `START_PARALLEL` slots of this event loop's agent starts, until released."""
    loop = asyncio.get_running_loop()
    gate = _start_gates.get(loop)
    if gate is None:
        gate = _start_gates[loop] = asyncio.Semaphore(START_PARALLEL)
    async with gate:
        yield


def base_environment() -> dict[str, str]:
    return {**AGENT_DEFAULT_ENV, **{key: os.environ[key] for key in BASE_ENV_KEYS if key in os.environ}}


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


class AgentProcess:
    """The process of one clone's agent and its JSON-RPC connection, while it runs."""

    def __init__(
        self,
        *,
        label: str,
        command: list[str],
        env: dict[str, str],
        log_path: Path | None,
        client: object,
        heard: Callable[[StreamEvent], None],
    ) -> None:
        self.label = label
        self.command = command
        self.env = env
        self.log_path = log_path
        self._client = client
        self._heard = heard
        self.proc: asyncio.subprocess.Process | None = None
        self.conn: Any = None
        self.drain: asyncio.Task[None] | None = None
        self.tail = bytearray()
        self.confined_to: str | None = None  # the lane worktree the process is confined to
        self.confinement: Confinement | None = None  # the run's, when the process started
        self.agent_name = ""  # `agentInfo.name` from `initialize`

    @property
    def running(self) -> bool:
        """The process is alive and connected."""
        return self.proc is not None and self.proc.returncode is None and self.conn is not None

    async def start(self, cwd: Path) -> None:
        """Start the agent in `cwd` (a running one is stopped first) and `initialize` it, in one of
        the run's start slots (`start_slot`)."""
        await self.stop(graceful=False)
        async with start_slot():
            await self._start(cwd)

    async def _start(self, cwd: Path) -> None:
        self.tail.clear()
        env = {**base_environment(), **self.env}
        command = await npx.for_lane(self.command, env)
        try:
            argv = reaped(command, env.get("PATH"))
        except AgentError as exc:
            raise AgentError(exc.kind, f"{self.label}: {exc.message}") from None
        try:
            # Confined to the lane of `cwd` for its whole life (docs/sandbox.md).
            with spawning(cwd, program_key("acp", self.command), env) as confined:
                proc = await start_process(  # a cancel meanwhile stops it, started
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
            self.confined_to = confined.key
            self.confinement = current()
        except OSError as exc:
            raise AgentError(
                "unavailable", f"{self.label}: cannot start {self.command[0]}: {exc.strerror or exc}"
            )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.drain = asyncio.create_task(
            self._drain_stderr(proc.stderr, Scanner(current(), cwd, f"its agent {self.label}"))
        )
        self.conn = acp.connect_to_agent(
            cast(acp.Client, self._client), proc.stdin, proc.stdout, observers=[self._heard]
        )
        try:
            init = await self.conn.initialize(
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
            await self.stop(graceful=False)
            raise AgentError(
                "auth" if exc.code == -32000 else kind, f"{self.label}: {text}", reset_at=reset_at
            )
        except (ConnectionError, OSError):
            raise await self.start_failed()
        info = init.agent_info
        self.agent_name = info.name if info is not None else ""
        program = program_named(self.agent_name)
        old = too_old(program, info.version or "", self.label) if program and info else None
        if old is not None:
            await self.stop(graceful=False)
            raise AgentError("auth", old)

    async def start_failed(self) -> AgentError:
        """The error for an agent that went away before it was of use (stopped here)."""
        proc = self.proc
        code = None
        if proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), SHUTDOWN_WAIT_S)
            code = proc.returncode
        tail = self.tail_text()
        await self.stop(graceful=False)
        kind, reset_at = classify(tail)
        if kind == "error":
            kind = "unavailable"  # it never got as far as a turn: the engine cannot be used now
        detail = f": {tail.strip().splitlines()[-1]}" if tail.strip() else ""
        return AgentError(
            kind, f"{self.label}: the agent did not start (exit code {code}){detail}", reset_at=reset_at
        )

    async def stop(self, *, graceful: bool) -> None:
        """End the process (stdin close → SIGTERM → SIGKILL, its whole group)."""
        proc, conn, drain = self.proc, self.conn, self.drain
        self.proc, self.conn, self.drain = None, None, None
        if proc is not None and graceful and proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), SHUTDOWN_WAIT_S)
        if proc is not None:
            if proc.returncode is None and graceful:
                signal_group(proc.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), SHUTDOWN_WAIT_S)
            if proc.returncode is None:
                signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
            # Commands the agent started may outlive it in its group.
            signal_group(proc.pid, signal.SIGKILL)
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), SHUTDOWN_WAIT_S)
        if drain is not None:
            try:
                await asyncio.wait_for(drain, SHUTDOWN_WAIT_S)
            except (TimeoutError, asyncio.CancelledError):
                drain.cancel()

    async def _drain_stderr(self, stream: asyncio.StreamReader, scanner: Scanner) -> None:
        sink = None
        if self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                sink = open(self.log_path, "ab")  # noqa: SIM115 - closed below, lives as long as the process
        try:
            while chunk := await stream.read(65536):
                self.tail += chunk
                del self.tail[:-_TAIL_BYTES]
                scanner.feed(chunk)  # the scripted agent's commands say what the OS refused here
                if sink is not None:
                    sink.write(chunk)
                    sink.flush()
        finally:
            if sink is not None:
                sink.close()

    def tail_text(self) -> str:
        return bytes(self.tail).decode("utf-8", errors="replace")


_START_LOCKS: dict[tuple[int, str], asyncio.Lock] = {}


def starts_alone(command: list[str]) -> bool:
    """Agents whose clones must not start at the same time (codex-acp, codex)."""
    return any(Path(part).name.startswith("codex") for part in command[:3])


def start_lock(label: str) -> asyncio.Lock:
    """One lock per executor (the label without its clone number) and event loop."""
    key = (id(asyncio.get_running_loop()), label.rsplit("#", 1)[0])
    return _START_LOCKS.setdefault(key, asyncio.Lock())


def signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
