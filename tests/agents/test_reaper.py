"""flowd's reaper: an agent (and what it started) dies with flowd, however flowd ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
