"""The user's socket files a lane must not reach (docs/sandbox.md "Socket files").

Landlock on this machine's ABIs does not cover `connect(2)` to a socket *file* (an ssh-agent, a
gpg-agent, a docker or systemd socket, an editor's IPC socket): any process of the user's that
can name the path can connect. What closes it here is a mount namespace of the lane process's
own, made by the binder (flowd/sandbox/bind.py) before it binds Landlock: the user's runtime dir
(`$XDG_RUNTIME_DIR`, `/run/user/<uid>`) under an empty read-only tmpfs, and every socket file
found where such sockets live (`/tmp` and `/var/tmp` two levels deep, `/run` three, `/dev/shm`,
the home directory's top, `~/.ssh`, `~/.gnupg`, `~/.docker`, and wherever the variables that name
them point) under `/dev/null`. Landlock then keeps the lane from unmounting them. A socket made
after the process started, or somewhere not looked at, is not hidden: the roster check's line
says so (`not sealed: socket files outside the hidden places`).

This needs user namespaces (`unshare(CLONE_NEWUSER)`), which some systems refuse to unprivileged
users (Ubuntu's AppArmor policy, Docker's default seccomp profile): `available()` asks the kernel
once, by starting the binder with a mask, and where it cannot, lanes start without masks and the
line says `not sealed: socket files`.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from flowd.sandbox import landlock
from flowd.sandbox.bind import binder

# Variables that name a socket of the user's session: not handed to a lane (blanked) when they
# name a unix socket, and the sockets they name hidden.
SOCKET_VARIABLES: tuple[str, ...] = (
    "SSH_AUTH_SOCK",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "VSCODE_IPC_HOOK",
    "VSCODE_IPC_HOOK_CLI",
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
    "TMUX",
    "KITTY_LISTEN_ON",
    "SWAYSOCK",
    "I3SOCK",
    "PULSE_SERVER",
)
# Where socket files live, and how deep to look: `/tmp/ssh-*/agent.*`, `/run/docker.sock`,
# `/run/dbus/system_bus_socket`, `/run/systemd/private`, `/run/containerd/containerd.sock`,
# `/run/systemd/journal/socket` (systemd's sockets start units, as root outside every lane).
_ROOTS = (("/tmp", 2), ("/var/tmp", 2), ("/run", 3), ("/var/run", 3), ("/dev/shm", 1))
_HOME = ("", ".ssh", ".gnupg", ".docker", ".docker/run")
_PATHS_IN = re.compile(r"/[^,;=\s]+")


def runtime_dirs() -> list[Path]:
    """The user's runtime dirs: where a session's agents, buses and editors keep their sockets."""
    found: list[Path] = []
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), f"/run/user/{os.getuid()}"):
        if candidate and os.path.isdir(candidate):
            real = Path(os.path.realpath(candidate))
            if real not in found:
                found.append(real)
    return found


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class _Listing:
    """What one folder held when flowd last listed it: its socket files and its folders; whether
    it may stand for the folder while the folder's time stays `mtime_ns` (`settled`)."""

    mtime_ns: int
    sockets: tuple[str, ...]
    folders: tuple[str, ...]
    settled: bool


# Each folder's last listing, used again while the folder's time is unchanged: a socket made,
# removed or renamed in a folder changes its time, so only folders that changed are listed again
# (a busy `/tmp` is hundreds of folders, listed at every confined process start). Only a listing
# of a folder then unchanged for `_SETTLED_NS` is used again (a change within the file system's
# timestamp grain after the listing would leave its time as it was); a folder gone from its
# parent's listing takes its own along, so the listings do not grow over a long run.
_LISTINGS: dict[str, _Listing] = {}
_LISTINGS_GUARD = threading.Lock()
_SETTLED_NS = 2_000_000_000


def _sockets_in(directory: str, depth: int, skip: frozenset[str] = frozenset()) -> list[str]:
    listing = _listing(directory)
    if listing is None:
        return []
    found = list(listing.sockets)
    if depth > 1:
        for folder in listing.folders:
            if folder not in skip:
                found += _sockets_in(folder, depth - 1, skip)
    return found


def _listing(directory: str) -> _Listing | None:
    try:
        mtime_ns: int | None = os.stat(directory).st_mtime_ns
    except OSError:
        mtime_ns = None
    with _LISTINGS_GUARD:
        last = _LISTINGS.get(directory)
    if last is not None and last.settled and last.mtime_ns == mtime_ns:
        return last
    listing = _list(directory, mtime_ns)
    with _LISTINGS_GUARD:
        if listing is None:
            _LISTINGS.pop(directory, None)
        else:
            _LISTINGS[directory] = listing
        if last is not None:
            for gone in set(last.folders) - set(listing.folders if listing else ()):
                below = gone + "/"
                for name in [n for n in _LISTINGS if n == gone or n.startswith(below)]:
                    del _LISTINGS[name]
    return listing


def _list(directory: str, mtime_ns: int | None) -> _Listing | None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return None
    sockets, folders = [], []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif (
                not entry.is_file(follow_symlinks=False) and not entry.is_symlink() and _is_socket(entry.path)
            ):
                sockets.append(entry.path)
        except OSError:
            continue
    settled = mtime_ns is not None and time.time_ns() - mtime_ns > _SETTLED_NS
    return _Listing(mtime_ns or 0, tuple(sockets), tuple(folders), settled)


def named_sockets(environ: dict[str, str]) -> list[str]:
    """The socket files the session's variables name (`unix:path=/run/…`, `unix:///var/…`)."""
    found: list[str] = []
    for variable in SOCKET_VARIABLES:
        for path in _PATHS_IN.findall(environ.get(variable, "")):
            if _is_socket(path):
                found.append(path)
    return found


def masks(home: Path, keep: list[Path], environ: dict[str, str] | None = None) -> list[str]:
    """The binder's masks for one process: `d<dir>` for each runtime dir, `f<file>` for each
    socket file found (module docstring). Nothing that is, holds or lies in a `keep` place (the
    lane's own places, the repository), so the lane's work and its program's state stay.
    Every confined process start asks (a busy `/tmp` holds hundreds of entries): the places are
    scanned from their real paths without following a link, so what is found is a real path
    already and only the variables' sockets are resolved."""
    kept = [os.path.realpath(path) for path in keep]
    inside = tuple(place.rstrip("/") + "/" for place in kept)
    chosen: list[str] = []
    seen: set[str] = set()

    def add(kind: str, real: str) -> None:
        if real in seen or real in kept or real.startswith(inside):
            return
        if kind == "d" and any(_within(place, real) for place in kept):
            return  # a runtime dir holding a place of the lane's (a socket file holds none)
        seen.add(real)
        chosen.append(kind + real)

    dirs = [str(d) for d in runtime_dirs()]
    for directory in dirs:
        add("d", directory)
    hidden = tuple(d.rstrip("/") + "/" for d in dirs)
    files = [os.path.realpath(p) for p in named_sockets(dict(os.environ) if environ is None else environ)]
    looked: set[str] = set()
    for root, depth in _ROOTS:
        real = os.path.realpath(root)  # /var/run is /run on most systems: looked at once
        if real not in looked:
            looked.add(real)
            files += _sockets_in(real, depth, frozenset(dirs))  # hidden whole
    for sub in _HOME:
        files += _sockets_in(os.path.realpath(home / sub), 1)
    for path in files:
        if path not in dirs and not path.startswith(hidden):
            add("f", path)
    return chosen


def blanked(environ: dict[str, str]) -> dict[str, str]:
    """The socket variables set in `environ` that name a unix socket, each set to "" (not
    handed to the lane: ssh, gpg, dbus and docker clients then look for no agent or bus)."""
    out: dict[str, str] = {}
    for variable in SOCKET_VARIABLES:
        value = environ.get(variable)
        if value and ("/" in value or value.startswith("unix:")) and not value.startswith(("tcp:", "ssh:")):
            out[variable] = ""
    return out


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def id_maps() -> tuple[str, str]:
    """The user namespace's maps: this uid and gid, mapped to themselves."""
    return f"{os.getuid()} {os.getuid()} 1", f"{os.getgid()} {os.getgid()} 1"


@functools.cache
def available() -> bool:
    """Whether the binder can make its namespaces here: asked once, by starting it with a mask
    on a path that does not exist (skipped) and `true`."""
    helper = binder()
    version = landlock.abi()
    if helper is None or version < 1:
        return False
    ruleset = landlock.build([landlock.Rule("/", landlock.READ)], version)
    try:
        uid_map, gid_map = id_maps()
        probe = [
            helper,
            str(ruleset.fd),
            "1",
            uid_map,
            gid_map,
            "d/nonexistent/flowd-probe",
            "/bin/true",
            "true",
        ]
        done = subprocess.run(probe, pass_fds=(ruleset.fd,), capture_output=True, check=False)
    except OSError:
        return False
    finally:
        ruleset.close()
    return done.returncode == 0
