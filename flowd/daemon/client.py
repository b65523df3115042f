"""Talking to the repository's daemon: starting it, opening a session, one request from the CLI.

A connection starts with one JSON line each way: the client's hello `{kind, version, …}` and the
daemon's answer `{version, pid, …}` or `{error}`. Then an `lsp` connection carries LSP frames, an
`rpc` connection JSON lines (`{id, method, params}` → `{id, result}` or `{id, error}`), and
`status` and `stop` end there (docs/editors.md, "One daemon per repository").
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flowd.base.errors import FlowdError
from flowd.daemon import place

START_TIMEOUT_S = 30.0


class DaemonUnavailable(FlowdError):
    """The daemon could not be started or reached; the caller serves or reads by itself."""


class Connection:
    def __init__(self, sock: socket.socket, info: dict[str, Any], answer: dict[str, Any]) -> None:
        self.sock = sock
        self.info = info
        self.answer = answer
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.reader.close()
        with contextlib.suppress(OSError):
            self.sock.close()


def hello(root: Path, kind: str, **extra: Any) -> Connection | None:
    """A connection whose hello was answered (None: no daemon runs for `root`)."""
    found = place.connect(root)
    if found is None:
        return None
    sock, info = found
    try:
        place.send_line(sock, {"kind": kind, "version": place.version(), **extra})
        conn = Connection(sock, info, {})
        answer = place.recv_line(conn.reader)
    except (OSError, ValueError):
        sock.close()
        return None
    if not isinstance(answer, dict):
        sock.close()
        return None
    if "error" in answer:
        sock.close()
        raise DaemonUnavailable(str(answer["error"]))
    conn.answer = answer
    return conn


def spawn(root: Path) -> subprocess.Popen[bytes]:
    """Start the daemon for `root`, detached; its stderr goes to its log file."""
    with place.log_path(root).open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "flowd.server.daemon", str(root)],
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


def _wait_started(
    root: Path, process: subprocess.Popen[bytes], kind: str, extra: dict[str, Any]
) -> Connection:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = hello(root, kind, **extra)
        if conn is not None:
            return conn
        if process.poll() is not None:
            break
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        if process.poll() is None:
            os.killpg(process.pid, 15)
    lines = [ln for ln in place.log_path(root).read_text(errors="replace").splitlines() if ln.strip()]
    why = lines[-1] if lines else f"it exited with code {process.poll()}"
    raise DaemonUnavailable(f"flowd's daemon for {root} could not start: {why}")


def stop(root: Path, reason: str, timeout_s: float = 10.0) -> bool:
    """Ask the daemon to end (sessions are told `reason`); True when one ran and is gone."""
    conn = hello(root, "stop", reason=reason)
    if conn is None:
        return False
    pid = int(conn.answer.get("pid", 0))
    conn.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    return True


def open_session(root: Path, kind: str = "lsp", **extra: Any) -> tuple[Connection, str | None]:
    """A connection to `root`'s daemon, starting it when none runs, replacing one older than this
    flowd. Returns it and, when a daemon was replaced, the sentence saying why."""
    try:
        with place.start_lock(root):
            conn = hello(root, kind, **extra)
            replaced = None
            if conn is not None:
                theirs = str(conn.answer.get("version", ""))
                if not place.newer(place.version(), theirs):
                    return conn, None
                conn.close()
                replaced = (
                    f"flowd: the daemon for {root} ran flowd {theirs}; it was replaced by flowd "
                    f"{place.version()} (this editor's), and every session reconnected"
                )
                stop(root, replaced)
            return _wait_started(root, spawn(root), kind, extra), replaced
    except OSError as exc:
        raise DaemonUnavailable(f"flowd's daemon for {root} could not start: {exc}") from None


def request(root: Path, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """One request to a running daemon (None: no daemon runs, or it could not answer: the caller
    does the work itself). A `FlowdError` the daemon met comes back as one."""
    try:
        conn = hello(root, "rpc")
    except (FlowdError, OSError):
        return None
    if conn is None:
        return None
    try:
        place.send_line(conn.sock, {"id": 1, "method": method, "params": params})
        answer = place.recv_line(conn.reader)
    except (OSError, ValueError):
        return None
    finally:
        conn.close()
    if not isinstance(answer, dict):
        return None
    error = answer.get("error")
    if isinstance(error, dict):
        if error.get("flowd"):
            raise FlowdError(str(error.get("message")), exit_code=int(error.get("exitCode", 2)))
        return None
    result = answer.get("result")
    return result if isinstance(result, dict) else None


def daemon_root(where: Path) -> Path | None:
    """`where`'s repository root when it is a main checkout (the only kind a daemon serves; a
    linked worktree's commands work on their own, as before). One `git`, no GitPython: the CLI
    asks the daemon before importing what it needs without one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir"],
            cwd=where, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split("\n")  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if len(out) < 2 or not out[0]:
        return None
    top = Path(out[0])
    return top if Path(out[1]) == top / ".git" else None
