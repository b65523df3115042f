"""The processes a lane left running (docs/sandbox-detection.md): found through `/proc` by the
lane's `FLOWD_LANE` mark, their start time and working directory, and killed. `engine/detect.py`
calls this when a step ends; `engine/core/strays.py` is another thing (stray tasks in a plan).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def _boot_time() -> float:
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def lane_processes(lane: str, since: float, roots: tuple[Path, ...]) -> list[tuple[int, str]]:
    """Processes a lane left behind: this user's, carrying `FLOWD_LANE=<lane>`, started since
    `since`, working under one of `roots` (this run's worktrees: another run's lane of the same
    name is not ours), and no longer flowd's descendants (an agent's own children are)."""
    return [(pid, cmd) for pid, cmd, _ in _scan(lane, since, roots)[0]]


def _scan(lane: str, since: float, roots: tuple[Path, ...]) -> tuple[list[tuple[int, str, bytes]], int]:
    """`lane_processes`, and how many candidates could not be told yet: a process in the middle
    of an `exec` shows no environment and no command line until the kernel has set them up, and
    a stray caught there (a double fork's child, on a busy machine) would be missed. Each found
    is (pid, command line, start time in clock ticks: what tells it from a later process that
    got its pid)."""
    mark = f"FLOWD_LANE={lane}".encode()
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    boot = _boot_time()
    found: list[tuple[int, str, bytes]] = []
    unsure = 0
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return [], 0
    for pid in pids:
        if pid == me or not _works_under(pid, roots):  # the cheap test first
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        marked, blank = mark in environ, environ == [b""] and not cmd
        started = boot + int(fields[19]) / tick
        if not (marked or blank) or fields[0] == b"Z" or started < since - 1.0:
            continue
        if _descends_from(int(fields[1]), me):
            continue
        if marked:
            found.append((pid, cmd, fields[19]))
        else:
            unsure += 1
    return found, unsure


def _works_under(pid: int, roots: tuple[Path, ...]) -> bool:
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return any(cwd == str(r) or cwd.startswith(f"{r}/") for r in roots)


def _descends_from(ppid: int, ancestor: int) -> bool:
    seen = 0
    while ppid > 1 and seen < 64:
        if ppid == ancestor:
            return True
        try:
            with open(f"/proc/{ppid}/stat", "rb") as handle:
                ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        seen += 1
    return ppid == ancestor


def kill_lane_processes(
    lane: str, since: float, roots: tuple[Path, ...], *, rounds: int = 50
) -> list[tuple[int, str]]:
    """Kill what `lane_processes` finds; return what it found. It looks again until a look finds
    nothing to kill and nothing it cannot tell yet (at most `rounds` looks, 10 ms apart): a
    stray can fork between a look and its kill, or be caught in the middle of an `exec`."""
    killed: dict[int, str] = {}
    for _ in range(rounds):
        strays, unsure = _scan(lane, since, roots)
        for pid, cmd, started in strays:
            if kill_if_same(pid, started):
                killed.setdefault(pid, cmd)
        if not strays and not unsure:
            break
        time.sleep(0.01)
    return list(killed.items())


def kill_if_same(pid: int, started: bytes) -> bool:
    """SIGKILL the process `pid` only if it is still the one that started at `started` (clock
    ticks after boot, `/proc/<pid>/stat`): the process is pinned by a pidfd first and its start
    time read after, so a stray that exited between the look and the kill never costs a process
    that got its pid since (one of yours) its life. False when it was not killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False  # gone already
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            now = handle.read().rsplit(b")", 1)[1].split()[19]
        if now != started:
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except (OSError, IndexError):
        return False
    finally:
        os.close(pidfd)
