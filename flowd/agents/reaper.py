"""Runs an agent so that nothing of it survives flowd, however flowd ends (docs/roster.md).

flowd starts every agent, gate and setup command as `python reaper.py <pid of flowd> --
<command…>` in a new process group. The reaper asks the kernel for SIGTERM when flowd dies
(`PR_SET_PDEATHSIG`), makes itself its subtree's subreaper (`PR_SET_CHILD_SUBREAPER`: a process
that leaves its group and its parent, `setsid` and a double fork, is still the reaper's), starts
the command in its own group and passes stdio through. On SIGTERM/SIGINT/SIGHUP (flowd's stop, or
flowd's death) it forwards SIGTERM to the group, waits a moment, then SIGKILLs the whole group and
every other process below it; when the command ends by itself, whatever it left running below the
reaper is killed too (docs/sandbox.md "Processes": nothing of a lane outlives it). It exits with
the command's status. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

TYPE_CHECKING = False  # typing itself is 15 ms of import: mypy reads this as typing.TYPE_CHECKING

if TYPE_CHECKING:
    import signal
else:  # the same names as plain ints, without `signal`'s enums: 4-7 ms less per start
    import _signal as signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_GRACE_S = 2.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the group kill on flowd's own stop still works
        return
    if os.getppid() != parent:  # flowd died before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


def _stop_group(child: int) -> None:
    """SIGTERM the agent, give it a moment, then SIGKILL every other process of the group."""
    try:
        os.kill(child, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline:
        try:
            if os.waitpid(child, os.WNOHANG)[0]:
                break
        except ChildProcessError:
            break
        time.sleep(0.05)
    _kill_group_but_me()
    _kill_below_me()


def _kill_below_me(rounds: int = 20) -> None:
    """SIGKILL every process below the reaper (orphans come to it, a subreaper), and reap them;
    again until none is left (one may fork between a look and its kill)."""
    me = os.getpid()
    for _ in range(rounds):
        below = _below(me, _parents())
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        _reap_all()
        if not below:
            return
        time.sleep(0.01)


def _parents() -> dict[int, int]:
    """Every process's parent, from one read of each `/proc/<pid>/stat` (a process gone
    meanwhile is left out)."""
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return parents
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                parents[int(name)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def _below(ancestor: int, parents: dict[int, int]) -> list[int]:
    """The processes whose chain of parents reaches `ancestor` (not `ancestor` itself)."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    seen = {ancestor}
    todo = list(children.get(ancestor, []))
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _reap_all() -> None:
    while True:
        try:
            if not os.waitpid(-1, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return


def _kill_group_but_me() -> None:
    me, group = os.getpid(), os.getpgid(0)
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc: the whole group, this process included
        os.killpg(group, signal.SIGKILL)
        return
    for pid in pids:
        try:
            if pid != me and os.getpgid(pid) == group:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, _frame: object) -> None:
    raise _Stop(signum)  # breaks the blocking waitpid (PEP 475 would retry it otherwise)


def _start(command: list[str]) -> int:
    child = os.fork()
    if child == 0:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"cannot start {command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    return child


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: reaper.py <parent pid> -- <command...>", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[2:]
    child = 0
    for sig in _SIGNALS:
        signal.signal(sig, _on_signal)
    try:
        _die_with_parent(parent)
        child = _start(command)
        while True:
            pid, status = os.waitpid(-1, 0)  # orphans that end are reaped here too
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                child = 0
                _kill_below_me()  # what the command left running ends with it
                return code if code >= 0 else 128 - code
    except _Stop as stop:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if child:
            _stop_group(child)
        else:
            _kill_below_me()
        return 128 + stop.signum
    except ChildProcessError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
