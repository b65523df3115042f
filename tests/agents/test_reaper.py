"""flowd's reaper: an agent (and what it started) dies with flowd, however flowd ends. Each test
runs against both reapers: the native one (flowd/agents/reaper_native.py, what flowd starts on
x86-64) and reaper.py (elsewhere)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowd.agents.base import reaped
from flowd.agents.reaper_native import native_reaper
from flowd.engine.gates import run_command
from flowd.trace.log import pid_alive

# A stand-in for flowd: starts `sh` (which starts a `sleep`) under the reaper, prints the pids.
PARENT = """
import subprocess, sys, time
from flowd.agents.base import reaped
argv = reaped(["sh", "-c", "sleep 300 & echo $!; wait"], native=sys.argv[2] == "native")
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
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


@pytest.fixture(params=["native", "python"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "native":
        assert native_reaper() is not None, "the native reaper is x86-64 code (this machine: another)"
    return str(request.param)


def _start(mode: str, kind: str) -> tuple[subprocess.Popen[str], list[int]]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode, kind], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    return parent, pids


def test_sigkill_of_the_parent_takes_the_agent_and_its_children(kind: str) -> None:
    parent, pids = _start("hold", kind)
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


def test_sigterm_of_the_reaper_stops_the_agent_group(kind: str) -> None:
    parent, (reaper, sleeper) = _start("exit", kind)
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


def test_what_a_command_leaves_running_dies_when_it_ends(kind: str) -> None:
    """The reaper is its subtree's subreaper: a `setsid` double fork is still below it."""
    argv = reaped(["sh", "-c", RUNAWAY], native=kind == "native")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _gone([_runaway_pid(done.stdout)])


def test_a_runaway_with_children_of_its_own_dies_with_them() -> None:
    """Everything below the reaper is found, at any depth: the orphan and the child it keeps."""
    family = "(cd / && exec setsid sh -c 'sleep 300 & echo $! $$; wait' &) ; sleep 0.2"
    done = subprocess.run(reaped(["sh", "-c", family]), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    child, orphan = (int(pid) for pid in done.stdout.split()[:2])
    assert _gone([child, orphan])


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


def _running(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (a zombie's reads empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("after", [0, 1, 2, 3, 5, 8, 0.002, 0.01, 0.05])
def test_a_gate_cancelled_while_it_starts_leaves_nothing_running(tmp_path: Path, after: float) -> None:
    """The merge train discards a candidate whose gates may have just started: asyncio's start,
    cancelled half-way, SIGKILLed the reaper and left the command running, orphaned, and the
    cancel waited for it to end (flowd/base/process_start.py). `after`: event-loop turns (whole
    numbers) or seconds before the cancel, so it lands at several points of the start."""
    marker = f"sleep 300.{os.getpid()}{int(after * 1000)}"

    async def cancelled() -> None:
        task = asyncio.ensure_future(run_command(marker, tmp_path, log=None, timeout_s=600))
        if isinstance(after, int):
            for _ in range(after):
                await asyncio.sleep(0)
        else:
            await asyncio.sleep(after)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancelled())
        deadline = time.monotonic() + 10
        while _running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _running(marker) == []
    finally:
        for pid in _running(marker):
            os.kill(pid, signal.SIGKILL)


def test_the_reaper_exits_with_the_commands_status(kind: str) -> None:
    """The command's exit code, 128 + the signal that killed it, 127 and one line when it cannot
    be started; a command that ignores SIGTERM is killed after the grace, with what it started."""
    native = kind == "native"
    assert subprocess.run(reaped(["sh", "-c", "exit 3"], native=native)).returncode == 3
    assert subprocess.run(reaped(["sh", "-c", "kill -9 $$"], native=native)).returncode == 128 + 9
    gone = reaped(["sh"], native=native)
    gone[gone.index("--") + 1] = "/no/such/program"
    done = subprocess.run(gone, capture_output=True, text=True)
    assert done.returncode == 127 and "cannot start /no/such/program" in done.stderr
    stubborn = reaped(
        ["sh", "-c", "trap '' TERM; sleep 300 & echo $!; while :; do sleep 0.1; done"], native=native
    )
    process = subprocess.Popen(stubborn, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout is not None
        sleeper = int(process.stdout.readline())
        process.terminate()
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
        assert _gone([sleeper])
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
