"""flowd's reaper: an agent (and what it started) dies with flowd, however flowd ends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flowd.agents.base import reaped
from flowd.engine.gates import run_command
from flowd.trace.log import pid_alive

# A stand-in for flowd: starts `sh` (which starts a `sleep`) under the reaper, prints the pids.
PARENT = """
import subprocess, sys, time
from flowd.agents.base import reaped
proc = subprocess.Popen(reaped(["sh", "-c", "sleep 300 & echo $!; wait"]), stdout=subprocess.PIPE,
                        text=True, start_new_session=True)
print(proc.pid, proc.stdout.readline().strip(), flush=True)
if sys.argv[1] == "exit":
    print(proc.wait(), flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    return pid_alive(pid)  # a zombie awaiting its reaper counts as gone


def _gone(pids: list[int], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _start(mode: str) -> tuple[subprocess.Popen[str], list[int]]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    return parent, pids


def test_sigkill_of_the_parent_takes_the_agent_and_its_children() -> None:
    parent, pids = _start("hold")
    try:
        parent.kill()
        parent.wait(10)
        assert _gone(pids), [p for p in pids if _alive(p)]
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.stdout is not None:
            parent.stdout.close()


def test_sigterm_of_the_reaper_stops_the_agent_group() -> None:
    parent, (reaper, sleeper) = _start("exit")
    try:
        os.kill(reaper, signal.SIGTERM)
        assert parent.stdout is not None
        assert int(parent.stdout.readline()) == 128 + signal.SIGTERM
        assert _gone([reaper, sleeper])
    finally:
        parent.kill()
        parent.wait(10)
        for pid in (reaper, sleeper):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.stdout is not None:
            parent.stdout.close()


# A process that leaves its lane every way a shell allows: its own session, its parent gone, its
# working directory and environment changed. It prints its pid and sleeps.
RUNAWAY = "(cd / && exec env -u FLOWD_LANE setsid sh -c 'echo $$; exec sleep 300' &) ; sleep 0.2"


def _runaway_pid(out: str) -> int:
    return int(out.split()[0])


def test_what_a_command_leaves_running_dies_when_it_ends() -> None:
    """The reaper is its subtree's subreaper: a `setsid` double fork is still below it."""
    done = subprocess.run(reaped(["sh", "-c", RUNAWAY]), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _gone([_runaway_pid(done.stdout)])


def test_a_gate_leaves_nothing_running(tmp_path: Path) -> None:
    """Gates and setup commands run under the reaper too (flowd/engine/gates.py)."""
    run = asyncio.run(run_command(RUNAWAY, tmp_path, log=None, timeout_s=60))
    assert run.ok, run.tail
    assert _gone([_runaway_pid(run.tail)])


def test_a_gate_stopped_on_its_timeout_leaves_nothing_running(tmp_path: Path) -> None:
    log = tmp_path / "gate.log"
    run = asyncio.run(run_command(f"{RUNAWAY}; sleep 300", tmp_path, log=log, timeout_s=2))
    assert not run.ok and run.exit_code == -1
    assert _gone([_runaway_pid(log.read_text())])
