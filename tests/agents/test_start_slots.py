"""The run's agent starts share `START_PARALLEL` slots, first come first served (docs/performance.md
"Agent starts"): real scripted-agent processes, each held at its spawn until the test lets it go on."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from pathlib import Path

from flowd.agents import acp_process
from flowd.agents.acp_client import AcpExecutor
from flowd.agents.factory import script_command
from flowd.trace.log import pid_alive

from .conftest import request


def _held(script: Path, marks: Path, release: Path, name: str) -> list[str]:
    """The scripted agent, started by a shell that first says it was spawned (a file in `marks`)
    and then waits for `release` to exist."""
    agent = shlex.join(script_command(script))
    mark, wait = shlex.quote(str(marks / name)), shlex.quote(str(release))
    shell = f"touch {mark}; while [ ! -e {wait} ]; do sleep 0.02; done; exec {agent}"
    return ["/bin/sh", "-c", shell]


async def _until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


async def test_starts_beyond_the_slots_wait_for_a_free_one_in_their_order(
    tmp_path: Path, worktree: Path, write_script: Callable[..., Path]
) -> None:
    script = write_script([{"reply": "ok"}])
    marks, release = tmp_path / "marks", tmp_path / "release"
    marks.mkdir()
    slots = acp_process.START_PARALLEL
    names = [f"c{i:02d}" for i in range(slots + 2)]
    executors = [
        AcpExecutor(
            label=f"held#{i}", command=_held(script, marks, release, name), log_path=tmp_path / f"{name}.log"
        )
        for i, name in enumerate(names, 1)
    ]
    try:
        warms = []
        for executor in executors:  # asked for in this order
            warms.append(asyncio.ensure_future(executor.warm(worktree)))
            await asyncio.sleep(0)
        await _until(lambda: len(list(marks.iterdir())) >= slots)
        # The first `slots` are spawned; the rest have not been, however long they wait.
        await asyncio.sleep(0.5)
        assert sorted(p.name for p in marks.iterdir()) == names[:slots]
        release.touch()
        await asyncio.wait_for(asyncio.gather(*warms), 60)
        assert sorted(p.name for p in marks.iterdir()) == names
        pids = [executor.pid for executor in executors]
        assert all(pid is not None and pid_alive(pid) for pid in pids)
        result = await executors[-1].run_turn(request(worktree))  # the last one started is of use
        assert result.text == "ok"
    finally:
        release.touch()
        for executor in executors:
            await executor.close()
    assert not any(pid_alive(pid) for pid in pids if pid is not None)
