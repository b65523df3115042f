"""Gates: shell commands that must pass, in a story worktree (per task) and on the epic (per merge).

Commands run in order and stop at the first red one. Each runs in its own process group so a
timeout or a cancel kills everything it started; its output goes to a log file and its tail
into the failure reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from flowd.agents.base import reaped
from flowd.base.process_start import start_process, stop_process
from flowd.engine.core.flaky import Failed, Rerun, after_gate_run
from flowd.events.model import Event, GateFlaky, GateResult, GateWhere
from flowd.sandbox.confine import Scanner, current, spawning
from flowd.vcs.admin import AdminProblem

TAIL_CHARS = 3000


@dataclass(frozen=True)
class CommandRun:
    command: str
    ok: bool
    exit_code: int
    duration_ms: int
    tail: str
    log: Path | None

    def describe(self) -> str:
        head = (
            f"`{self.command}` exited with {self.exit_code}"
            if self.exit_code >= 0
            else f"`{self.command}` timed out"
        )
        return f"{head}:\n{self.tail}".rstrip()


def _slug(command: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", command).strip("-")[:40] or "gate"


async def run_command(
    command: str, cwd: Path, *, log: Path | None, timeout_s: float, env: dict[str, str] | None = None
) -> CommandRun:
    started = time.monotonic()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    sink = log.open("wb") if log is not None else None
    # Confined like the lane's agent (docs/sandbox.md); what the OS refuses, the output names.
    scanner = Scanner(current(), cwd, f"`{command}`")
    try:
        with spawning(cwd, env=env) as confined:
            # `sh -c`, as `create_subprocess_shell` runs it, through the binder when confined,
            # under the reaper: nothing it starts outlives it (flowd/agents/reaper.py).
            # A cancel while it starts stops it once started (flowd/base/process_start.py).
            process = await start_process(
                *confined.argv(reaped(["/bin/sh", "-c", command])),
                cwd=cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {}), **confined.env},
                preexec_fn=confined.preexec_fn,
                pass_fds=confined.pass_fds,
            )
        tail = bytearray()
        assert process.stdout is not None

        async def pump() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(65536):
                if sink is not None:
                    sink.write(chunk)
                scanner.feed(chunk)
                tail.extend(chunk)
                del tail[: max(0, len(tail) - TAIL_CHARS * 2)]

        both = asyncio.gather(pump(), process.wait())
        # Stopped (a timeout, a cancel: the merge train discards a candidate), the gathering
        # ends with the cancel as its exception; it is expected, not left unretrieved.
        both.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        try:
            await asyncio.wait_for(both, timeout_s)
            code = process.returncode if process.returncode is not None else -1
        except TimeoutError:
            await stop_process(process)
            code = -1
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.shield(stop_process(process))
            raise
    finally:
        scanner.close()
        if sink is not None:
            sink.close()
    text = tail.decode("utf-8", errors="replace")[-TAIL_CHARS:]
    duration = int((time.monotonic() - started) * 1000)
    return CommandRun(command, code == 0, code, duration, text, log)


async def run_gates(
    commands: list[str],
    cwd: Path,
    *,
    where: GateWhere,
    lane: str | None,
    emit: Callable[[Event], object],
    log_dir: Path | None,
    timeout_s: float,
    env: dict[str, str] | None = None,
    retries: int = 0,
) -> CommandRun | None:
    """Run the gates in order; the first red one is returned (None: all green). `env` adds the
    lane's variables (docs/worktree-bootstrap.md).

    A red gate runs again up to `retries` times (engine/core/flaky.py); green on a rerun is
    `GateFlaky` and counts as green. Every run is its own `GateResult`."""
    for number, command in enumerate(commands, start=1):
        red_before = 0
        while True:
            # A rerun logs beside the first run, so a flaky gate's red output is kept.
            rerun = f".rerun{red_before}" if red_before else ""
            log = log_dir / f"{number}-{_slug(command)}{rerun}.log" if log_dir is not None else None
            result = await run_command(command, cwd, log=log, timeout_s=timeout_s, env=env)
            emit(
                GateResult(
                    lane=lane,
                    where=where,
                    gate=command,
                    ok=result.ok,
                    exit_code=result.exit_code,
                    duration_ms=result.duration_ms,
                )
            )
            step = after_gate_run(result.ok, red_before, retries, timed_out=result.exit_code < 0)
            if isinstance(step, Rerun):
                red_before += 1
                continue
            break
        if isinstance(step, Failed):
            return result
        if step.flaky:
            emit(GateFlaky(lane=lane, where=where, gate=command, attempts=step.red_runs))
    return None


class NotPlaced(Exception):
    """Gates that were to run elsewhere could not (a node lost, a push refused): run them here."""


class GatesElsewhere(Protocol):
    """Where a merge candidate's epic gates run when not on this machine (docs/scale-out.md,
    "Candidate gates on the cluster"): the candidate's tip in, the first red gate (None: green)
    out, its events emitted here as they happen, and what the gates wrote in the admin files and
    object store of the slot they ran in (put back there) added to `found`, for the train to
    report as it does its own. Raises `NotPlaced` to have them run here."""

    async def gate(
        self, cid: int, tip: str, commands: list[str], lane: str | None, found: list[AdminProblem]
    ) -> CommandRun | None: ...
