"""Runs an agent so that nothing of it survives flowd, however flowd ends (docs/roster.md).

flowd starts every agent as `python reaper.py <pid of flowd> -- <command…>` in a new process
group. The reaper asks the kernel for SIGTERM when flowd dies (`PR_SET_PDEATHSIG`), starts the
agent in its own group and passes stdio through. On SIGTERM/SIGINT/SIGHUP (flowd's stop, or
flowd's death) it forwards SIGTERM to the group, waits a moment, then SIGKILLs the whole group:
the agent and whatever it started (claude's CLI, codex's app-server, their shells). It exits
with the agent's status. Standard library only: it starts in milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_GRACE_S = 2.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
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
            pid, status = os.waitpid(child, 0)
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                return code if code >= 0 else 128 - code
    except _Stop as stop:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if child:
            _stop_group(child)
        return 128 + stop.signum
    except ChildProcessError:
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
