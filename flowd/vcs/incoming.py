"""How checked objects enter a repository's store (docs/sandbox.md "How objects come in"): the
objects a take-in hands over, as one pack, go through `git index-pack --strict`, which writes
into an incoming store of flowd's own inside the store (the store its alternate, as
`receive-pack`'s quarantine); the pack is renamed in only when git is content. Every take-in
makes a pack, so flowd rolls its own small packs up as they gather (`git pack-objects
--stdin-packs`), sixteen at a time, and a repository never holds more than a few dozen of them.
After a lane's take-in, the next one's git is started ahead and waits for its pack ("git,
started ahead" below).

Why packs and not loose objects: a commit of a few files is five or six objects, each a file
and most a new fan-out folder in the incoming store and in the store; a pack is two files in
folders that exist. Measured in `bench/quarantine.py`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from flowd.base import leftovers
from flowd.vcs.gitcli import alternates, git_env

log = logging.getLogger("flowd.vcs.incoming")

INCOMING = "flowd-incoming-"  # `<store>/flowd-incoming-<pid>-*`: git writes there, flowd moves in
ROLL_UP = 16  # packs of one level rolled into one of the next
# The take-in's pack is as durable as the loose objects it replaces: git flushes a pack to disk
# by default but not a loose object (`core.fsyncObjectFiles` is off), and the lane's own git
# wrote these loose, unflushed, into its quarantine. About 0.6 ms a take-in here.
_NO_FSYNC = ("-c", "core.fsync=-pack,-pack-metadata")


class Refused(Exception):
    """What a lane (or flowd's own git) wrote cannot be taken in: one sentence saying why."""


def feed(git_dir: Path, data: bytes | BinaryIO, source: Path, *, ahead: bool = False) -> None:
    """Hand the pack `data` (bytes, or a file open at its start) to git (the repository's git
    dir, or a submodule's), which checks every object and link (`--strict`: well formed, hashes
    right, connected, no `.gitmodules` naming a command), and move it into the store when git is
    content. `Refused` (naming `source`, the store the objects came from) when git is not:
    nothing reaches the store. `ahead`: start the next take-in's git for `git_dir` after this
    one ("git, started ahead" below; a lane's take-ins into the repository's own store)."""
    objects = git_dir / "objects"
    env = _env(objects)
    # A pack in memory goes to a git started ahead when one waits; a file, rare and big, to a
    # git started for it.
    ready = _take_ready(git_dir, env) if isinstance(data, bytes) else None
    store = ready.store if ready is not None else _store(objects)
    try:
        out, err, code = _index_pack(git_dir, data, env, store, ready)
    except BaseException:
        shutil.rmtree(store, ignore_errors=True)
        raise
    if code != 0:
        # What git wrote is never moved in: the incoming store goes with it.
        shutil.rmtree(store, ignore_errors=True)
        said = err.decode("utf-8", "replace").strip().splitlines()
        # git's last line is the verdict ("fsck error in packed object"), the first says why.
        reason = "; ".join(dict.fromkeys([*said[:1], *said[-1:]])) or "no reason given"
        raise Refused(f"git refused the objects of its store {source}: {reason}")
    name = "pack-" + out.decode("ascii", "replace").split()[-1]
    _move_in(store / "pack", objects / "pack", name)
    _give_back(objects, store)
    _packs(objects).add(git_dir, name)
    if ahead:
        _start_ready(git_dir, env)


def _index_pack(
    git_dir: Path, data: bytes | BinaryIO, env: dict[str, str], store: Path, ready: _Ready | None
) -> tuple[bytes, bytes, int]:
    """git's output, its complaints and its exit code for the pack `data`, written into `store`."""
    if ready is not None and isinstance(data, bytes):
        try:
            out, err = ready.proc.communicate(data)
        except BaseException:
            _end(ready)
            raise
        return out, err, ready.proc.returncode
    proc = subprocess.run(
        _argv(git_dir),
        input=data if isinstance(data, bytes) else None,
        stdin=None if isinstance(data, bytes) else data,
        capture_output=True,
        env={**env, "GIT_OBJECT_DIRECTORY": str(store)},
        check=False,
    )
    return proc.stdout, proc.stderr, proc.returncode


def _argv(git_dir: Path) -> list[str]:
    return ["git", *_NO_FSYNC, "--git-dir", str(git_dir), "index-pack", "--stdin", "--strict", "--fix-thin"]


def _env(objects: Path) -> dict[str, str]:
    """The take-in's git's environment but for its incoming store (`GIT_OBJECT_DIRECTORY`)."""
    env = git_env()
    env.pop("GIT_QUARANTINE_PATH", None)
    env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = alternates([objects])
    return env


def _move_in(src: Path, dst: Path, name: str) -> None:
    """The pack `name` from `src` into `dst`, its index last (git finds a pack by its index).
    A pack already there is the same pack (the name is its hash)."""
    for suffix in (".pack", ".rev", ".idx"):
        with contextlib.suppress(FileNotFoundError):
            os.rename(src / (name + suffix), dst / (name + suffix))


# -- incoming stores ------------------------------------------------------------------------------
# This process's empty incoming stores, by (pid, store): kept between take-ins (a new folder
# costs more than git's writing of a small pack); the pid keeps a forked child off its parent's.
_IDLE: dict[tuple[int, Path], list[Path]] = {}
_IDLE_GUARD = threading.Lock()


def _store(objects: Path) -> Path:
    """An empty incoming store of this process in the store `objects`, flowd's alone (no lane
    can write the store): given back (`_give_back`) when git was content, removed when not
    (what it wrote is never moved in)."""
    with _IDLE_GUARD:
        idle = _IDLE.setdefault((os.getpid(), objects), [])
        if idle:
            return idle.pop()
    # The first of this process in the store removes what a gone flowd left (base/leftovers.py).
    store = leftovers.made(INCOMING, objects)
    (store / "pack").mkdir()
    return store


def _give_back(objects: Path, store: Path) -> None:
    with _IDLE_GUARD:
        _IDLE.setdefault((os.getpid(), objects), []).append(store)


# -- git, started ahead ---------------------------------------------------------------------------
# After a lane's take-in, the next one's `index-pack` is started, in an incoming store of its
# own, and waits for its pack on its input: its start (1.3-1.5 ms here, most of what git costs
# on a small pack) is paid while the agent works, not while the lane waits for its take-in
# (docs/sandbox.md "How objects come in"). It reads the store's packs when it needs them, as any
# git does (a pack added or rolled up since its start is found: git looks again when an object
# is missing). Started `AHEAD_AFTER_S` after the take-in: a git started at once slowed the rest
# of that take-in by more than it saved (the quarantine's removal 0.5 -> 1.7 ms, measured).
# Bounded: `READY` per git dir, `READY_ALL` in all, the oldest ended for a new one. A ready git
# is flowd's own child and ends when its input closes: at flowd's exit (`end_ready`), and when
# a killed flowd's pipes close (its incoming store is then left to the next flowd's sweep).
READY = 2
READY_ALL = 4
AHEAD_AFTER_S = 0.02


@dataclass
class _Ready:
    proc: subprocess.Popen[bytes]
    store: Path
    env: dict[str, str]  # as `_env` gave it: a changed environment is a git started anew
    started: float = field(default_factory=time.monotonic)


_READY: dict[tuple[int, Path], list[_Ready]] = {}  # by (pid, git dir), oldest first
_READY_GUARD = threading.Lock()
_STARTING: dict[threading.Thread, tuple[int, Path]] = {}  # threads about to start one: its key
_EXITING = threading.Event()


def _take_ready(git_dir: Path, env: dict[str, str]) -> _Ready | None:
    """A git started ahead for `git_dir` with this environment and still waiting, or None."""
    stale: list[_Ready] = []
    found = None
    with _READY_GUARD:
        waiting = _READY.get((os.getpid(), git_dir), [])
        while waiting and found is None:
            ready = waiting.pop()
            if ready.env == env and ready.proc.poll() is None:
                found = ready
            else:
                stale.append(ready)
    for ready in stale:
        _end(ready)
    return found


def _start_ready(git_dir: Path, env: dict[str, str]) -> None:
    """Start the next take-in's git for `git_dir`, on a thread of its own, unless `READY` wait."""
    key = (os.getpid(), git_dir)
    thread = threading.Thread(target=_ready_for, args=(key, env), name="flowd-index-pack", daemon=True)
    with _READY_GUARD:
        if len(_READY.get(key, [])) + sum(k == key for k in _STARTING.values()) >= READY:
            return
        _STARTING[thread] = key
    thread.start()


def _ready_for(key: tuple[int, Path], env: dict[str, str]) -> None:
    try:
        if not _EXITING.wait(AHEAD_AFTER_S):
            _start(key, env)
    finally:
        with _READY_GUARD:
            _STARTING.pop(threading.current_thread(), None)


def _start(key: tuple[int, Path], env: dict[str, str]) -> None:
    git_dir = key[1]
    try:
        store = _store(git_dir / "objects")
    except OSError as exc:  # the repository gone meanwhile
        log.debug("%s: no git started ahead: %s", git_dir, exc)
        return
    try:
        proc = subprocess.Popen(
            _argv(git_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "GIT_OBJECT_DIRECTORY": str(store)},
        )
    except OSError as exc:
        log.debug("%s: no git started ahead: %s", git_dir, exc)
        _give_back(git_dir / "objects", store)
        return
    ended: list[_Ready] = []
    with _READY_GUARD:
        waiting = _READY.setdefault(key, [])
        waiting.append(_Ready(proc, store, env))
        if len(waiting) > READY:
            ended.append(waiting.pop(0))
        while sum(len(w) for w in _READY.values()) > READY_ALL:
            oldest = min((w for w in _READY.values() if w), key=lambda w: w[0].started)
            ended.append(oldest.pop(0))
    for ready in ended:
        _end(ready)


def _end(ready: _Ready) -> None:
    """End a git started ahead (its input closed: git stops on a pack that never came) and
    remove its incoming store."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        ready.proc.communicate(timeout=5)
    if ready.proc.returncode is None:
        ready.proc.kill()
        ready.proc.wait()
    shutil.rmtree(ready.store, ignore_errors=True)


def end_ready() -> None:
    """End every git this process started ahead, or is about to (at its exit; tests)."""
    with _READY_GUARD:
        starting = list(_STARTING)
    for thread in starting:
        thread.join()
    with _READY_GUARD:
        mine = [k for k in _READY if k[0] == os.getpid()]
        ended = [ready for key in mine for ready in _READY.pop(key)]
    for ready in ended:
        _end(ready)


@atexit.register
def _at_exit() -> None:
    _EXITING.set()
    end_ready()


# -- rolling flowd's packs up ---------------------------------------------------------------------
@dataclass
class _Packs:
    """The packs this process moved into one store, by level: level 0 from take-ins, level n+1
    rolled up from `ROLL_UP` of level n. Only these are ever rolled up and removed: a pack of
    yours, or another process's, is never touched."""

    levels: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, git_dir: Path, name: str, level: int = 0) -> None:
        with self.lock:
            while len(self.levels) <= level:
                self.levels.append([])
            if name in self.levels[level]:
                return
            self.levels[level].append(name)
            if len(self.levels[level]) < ROLL_UP:
                return
            batch, self.levels[level] = self.levels[level], []
        rolled = _roll_up(git_dir, batch)
        if rolled is not None:
            self.add(git_dir, rolled, level + 1)


_PACKS: dict[tuple[int, Path], _Packs] = {}
_PACKS_GUARD = threading.Lock()


def _packs(objects: Path) -> _Packs:
    with _PACKS_GUARD:
        return _PACKS.setdefault((os.getpid(), objects), _Packs())


def _roll_up(git_dir: Path, batch: list[str]) -> str | None:
    """One pack of every object of `batch` (packs of the store, all checked when they came in),
    the batch removed after; None, the batch left as it is, when git could not (a `git gc` of
    yours packed them meanwhile: nothing is lost either way)."""
    pack_dir = git_dir / "objects" / "pack"
    proc = subprocess.run(
        ["git", "--git-dir", str(git_dir), "pack-objects", "-q", "--stdin-packs", str(pack_dir / "pack")],
        input="".join(f"{name}.pack\n" for name in batch).encode(),
        capture_output=True,
        env=git_env(),
        check=False,
    )
    if proc.returncode != 0:
        log.debug(
            "%s: flowd's packs not rolled up: %s", git_dir, proc.stderr.decode("utf-8", "replace").strip()
        )
        return None
    rolled = "pack-" + proc.stdout.decode("ascii", "replace").strip()
    for name in batch:
        if name != rolled:
            for suffix in (".idx", ".rev", ".pack"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(pack_dir / (name + suffix))
    return rolled
