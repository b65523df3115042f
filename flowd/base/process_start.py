"""Starting a child process so that a cancel never leaves it running (docs/sandbox.md "Processes").

`asyncio.create_subprocess_exec`, cancelled while the process starts (its pipes still being
connected), SIGKILLs the process it forked and waits for its pipes to close. flowd starts its
agents, gates and setup commands under its reaper (flowd/agents/reaper.py), so that SIGKILL lands
on the reaper, which then cannot end the command it started: the command runs on, orphaned, and
the cancelled start waits until it ends and closes its output. The merge train meets this when it
discards a candidate whose gates have just started (docs/merging.md): it waited a whole gate run,
and the gates ran on, unwatched. Here the start always finishes; a cancel that came meanwhile
then stops the process as any other stop does (SIGTERM: a reaper ends its command and everything
below it), and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

STOP_WAIT_S = 5.0  # the reaper's own grace is 2 s


async def start_process(*argv: str, **options: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec(*argv, **options)`, whole: raises what the start raised
    (`OSError`), or `CancelledError` once the process a cancel caught starting has been stopped."""
    start = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, **options))
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        # Shielded again: a second cancel must not leave it half-stopped either.
        await asyncio.shield(_stop_started(start))
        raise


async def _stop_started(start: asyncio.Future[asyncio.subprocess.Process]) -> None:
    try:
        process = await start
    except Exception:  # it never started (OSError): nothing to stop
        return
    await stop_process(process)


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (a reaper ends its command and everything below it), then the process group's
    SIGKILL when it has not ended within `STOP_WAIT_S`; returns once it has ended and its pipes
    are closed."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), STOP_WAIT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
