"""Where a repository's daemon lives, and reaching it only when it is the user's own.

One daemon per repository's main checkout. Its state sits in a private directory
(`$XDG_RUNTIME_DIR/flowd/`, else `~/.cache/flowd/daemon/`; mode 0700, the user's, checked before every
use): `daemon-<key>.json` (0600: pid, version, repository, socket name, the page's URL and token),
`daemon-<key>.lock` (held by whoever starts it) and `daemon-<key>.log` (its stderr). The key is a
hash of the main checkout's path.

The daemon listens on an abstract unix socket with a random name (in the info file). An abstract
socket has no file a confined lane could be handed; Landlock's abstract-socket scope keeps a lane
from connecting to one made outside its domain, and the daemon also checks each peer's
credentials (docs/editors.md, "Who may connect"). The lane policy hides both directories
(`SECRETS` in flowd/sandbox/policy.py), so no lane reads the page's token. A client checks the listener too: a socket held
by another user is refused, never used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flowd import __version__
from flowd.base.errors import FlowdError

# Overrides the version a daemon and its forwarders report: how the tests play an upgrade.
VERSION_ENV = "FLOWD_DAEMON_VERSION"
CONNECT_TIMEOUT_S = 5.0
HELLO_LIMIT = 1 << 20


class DaemonRefused(FlowdError):
    """The daemon's directory or socket is not the user's own: it is never used."""


def version() -> str:
    return os.environ.get(VERSION_ENV) or __version__


def newer(mine: str, theirs: str) -> bool:
    """Whether version `mine` is newer than `theirs` (numeric parts compared, then the text)."""

    def parts(text: str) -> tuple[tuple[int, ...], str]:
        nums: list[int] = []
        for piece in text.replace("-", ".").split("."):
            if not piece.isdigit():
                break
            nums.append(int(piece))
        return tuple(nums), text

    return parts(mine) > parts(theirs)


def state_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "flowd"
    return Path.home() / ".cache" / "flowd" / "daemon"


def private_dir(*, create: bool) -> Path:
    """The state directory, made 0700 if missing; refused when it is not the user's own."""
    where = state_dir()
    if create:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        info = os.lstat(where)
    except FileNotFoundError:
        return where
    import stat

    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise DaemonRefused(
            f"{where} is not a directory of this user; flowd's daemon will not use it "
            "(remove it, or set XDG_RUNTIME_DIR to a directory of yours)"
        )
    if info.st_mode & 0o077:
        os.chmod(where, 0o700)  # the user's own directory, made private again
    return where


def key_of(root: Path) -> str:
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


def info_path(root: Path) -> Path:
    return private_dir(create=False) / f"daemon-{key_of(root)}.json"


def log_path(root: Path) -> Path:
    return private_dir(create=True) / f"daemon-{key_of(root)}.log"


def read_info(root: Path) -> dict[str, Any] | None:
    try:
        path = info_path(root)
        if path.stat().st_uid != os.getuid():
            raise DaemonRefused(f"{path} belongs to another user; flowd's daemon will not use it")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_info(root: Path, info: dict[str, Any]) -> Path:
    path = private_dir(create=True) / f"daemon-{key_of(root)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(info) + "\n")
    os.replace(tmp, path)
    return path


def remove_info(root: Path, pid: int) -> None:
    """Remove the info file if it still names daemon `pid` (a newer one may have replaced it)."""
    info = read_info(root)
    if info is not None and info.get("pid") == pid:
        with contextlib.suppress(OSError):
            info_path(root).unlink()


@contextlib.contextmanager
def start_lock(root: Path, timeout_s: float = 60.0) -> Iterator[None]:
    """Held while a daemon is found or started: two forwarders racing make one daemon."""
    path = private_dir(create=True) / f"daemon-{key_of(root)}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FlowdError(
                        f"{path}: another flowd has held the daemon's start lock for {timeout_s:.0f} s"
                    )
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def peer(sock: socket.socket) -> tuple[int, int, int]:
    """The (pid, uid, gid) at the other end of a unix socket, as the kernel recorded them."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def connect(root: Path) -> tuple[socket.socket, dict[str, Any]] | None:
    """A connection to the repository's running daemon (None: none runs), checked to be the user's."""
    info = read_info(root)
    name = info.get("socket") if info else None
    if not isinstance(name, str) or info is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        return None  # stale: the daemon is gone
    _pid, uid, _gid = peer(sock)
    if uid != os.getuid():
        sock.close()
        raise DaemonRefused(f"the socket {name!r} is held by another user (uid {uid}); it is not used")
    sock.settimeout(None)
    return sock, info


def send_line(sock: socket.socket, value: Any) -> None:
    sock.sendall(json.dumps(value).encode() + b"\n")


def recv_line(reader: Any) -> Any:
    line = reader.readline(HELLO_LIMIT)
    if not line:
        raise ConnectionError("the daemon closed the connection")
    return json.loads(line)
