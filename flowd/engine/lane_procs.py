"""The processes a lane left running (docs/sandbox-detection.md): found through `/proc` by the
lane's `FLOWD_LANE` mark, their start time and working directory, and killed. `engine/detect.py`
calls this when a step ends; `engine/core/strays.py` is another thing (stray tasks in a plan).
"""

from __future__ import annotations

import contextlib
import os
import signal
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
    mark = f"FLOWD_LANE={lane}".encode()
    me, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    boot = _boot_time()
    found = []
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me or not _works_under(pid, roots):  # the cheap test first
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if mark not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        started = boot + int(fields[19]) / tick
        if fields[0] == b"Z" or started < since - 1.0:
            continue
        if not _descends_from(int(fields[1]), me):
            found.append((pid, cmd))
    return found


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


def kill_lane_processes(lane: str, since: float, roots: tuple[Path, ...]) -> list[tuple[int, str]]:
    """Kill what `lane_processes` finds; return what it found."""
    strays = lane_processes(lane, since, roots)
    for pid, _cmd in strays:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return strays
