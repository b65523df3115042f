"""The processes a lane leaves behind, found and killed through /proc (flowd/engine/lane_procs.py),
with real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from flowd.engine.lane_procs import kill_if_same, kill_lane_processes, lane_processes

# Each child detaches (a new session) and execs twice (setsid, then sh) before it sleeps: a look
# taken while the parent exits catches some of them in the middle of an exec, on a busy machine
# most of all, where the kernel shows no environment and no command line yet.
SPAWN = "for i in $(seq {n}); do setsid sh -c 'exec sleep 30' < /dev/null > /dev/null 2>&1 & done"


def _marked(lane: str, root: Path) -> list[int]:
    """Every live process carrying the lane's mark and working under `root`, read from /proc
    without the module under test."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not os.readlink(f"/proc/{name}/cwd").startswith(str(root)):
                continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                marked = f"FLOWD_LANE={lane}".encode() in handle.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as handle:
                zombie = handle.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if marked and not zombie:
            found.append(int(name))
    return found


def _settled(lane: str, root: Path) -> list[int]:
    """What is still marked once every exec under way has had time to finish (a condition with a
    deadline, not a fixed wait)."""
    deadline = time.monotonic() + 5
    seen = _marked(lane, root)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        again = _marked(lane, root)
        if again == seen:
            return seen
        seen = again
    return seen


def test_every_detached_child_is_killed_even_when_caught_mid_exec(tmp_path: Path) -> None:
    env = {**os.environ, "FLOWD_LANE": "s1"}
    for _ in range(5):
        since = time.time()
        subprocess.run(["sh", "-c", SPAWN.format(n=30)], cwd=tmp_path, env=env, check=True)
        try:
            killed = kill_lane_processes("s1", since, (tmp_path,))
            left = _settled("s1", tmp_path)
            assert left == [], f"{len(left)} of 30 detached children outlived the kill"
            assert len(killed) >= 30
        finally:
            for pid in _settled("s1", tmp_path):
                os.kill(pid, signal.SIGKILL)


def test_another_lane_and_flowds_own_children_are_left_alone(tmp_path: Path) -> None:
    other = subprocess.Popen(
        ["sh", "-c", "setsid sleep 30 &"], cwd=tmp_path, env={**os.environ, "FLOWD_LANE": "s2"}
    )
    own = subprocess.Popen(["sleep", "30"], cwd=tmp_path, env={**os.environ, "FLOWD_LANE": "s1"})
    try:
        other.wait()
        assert kill_lane_processes("s1", time.time() - 5, (tmp_path,)) == []
        assert own.poll() is None
        assert len(lane_processes("s2", time.time() - 5, (tmp_path,))) == 1
        assert lane_processes("s2", time.time() - 5, (tmp_path / "elsewhere",)) == []
    finally:
        own.kill()
        own.wait()
        kill_lane_processes("s2", 0.0, (tmp_path,))


def test_a_process_that_got_a_strays_pid_since_is_not_killed(tmp_path: Path) -> None:
    """The kill pins the process by a pidfd and checks its start time first: a look's pid that
    names another process by now (a stray gone, its pid given again) is spared."""
    victim = subprocess.Popen(["sleep", "30"], cwd=tmp_path)
    try:
        with open(f"/proc/{victim.pid}/stat", "rb") as handle:
            started = handle.read().rsplit(b")", 1)[1].split()[19]
        assert not kill_if_same(victim.pid, started + b"0")  # a start time the pid no longer has
        assert victim.poll() is None
        assert kill_if_same(victim.pid, started)
        assert victim.wait(timeout=5) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()
