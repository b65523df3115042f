"""How checked objects enter a repository's store (docs/sandbox.md "How objects come in"): the
objects a take-in hands over, as one pack, go through `git index-pack --strict`, which writes
into an incoming store of flowd's own inside the store (the store its alternate, as
`receive-pack`'s quarantine); the pack is renamed in only when git is content. Every take-in
makes a pack, so flowd rolls its own small packs up as they gather (`git pack-objects
--stdin-packs`), sixteen at a time, and a repository never holds more than a few dozen of them.

Why packs and not loose objects: a commit of a few files is five or six objects, each a file
and most a new fan-out folder in the incoming store and in the store; a pack is two files in
folders that exist. Measured in `bench/quarantine.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
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


def feed(git_dir: Path, data: bytes | BinaryIO, source: Path) -> None:
    """Hand the pack `data` (bytes, or a file open at its start) to git (the repository's git
    dir, or a submodule's), which checks every object and link (`--strict`: well formed, hashes
    right, connected, no `.gitmodules` naming a command), and move it into the store when git is
    content. `Refused` (naming `source`, the store the objects came from) when git is not:
    nothing reaches the store."""
    objects = git_dir / "objects"
    with _incoming(objects) as incoming:
        env = git_env()
        env.pop("GIT_QUARANTINE_PATH", None)
        env.update(GIT_OBJECT_DIRECTORY=str(incoming), GIT_ALTERNATE_OBJECT_DIRECTORIES=alternates([objects]))
        proc = subprocess.run(
            ["git", *_NO_FSYNC, "--git-dir", str(git_dir), "index-pack", "--stdin", "--strict", "--fix-thin"],
            input=data if isinstance(data, bytes) else None,
            stdin=None if isinstance(data, bytes) else data,
            capture_output=True,
            env=env,
            check=False,
        )
        if proc.returncode != 0:
            said = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            # git's last line is the verdict ("fsck error in packed object"), the first says why.
            reason = "; ".join(dict.fromkeys([*said[:1], *said[-1:]])) or "no reason given"
            raise Refused(f"git refused the objects of its store {source}: {reason}")
        name = "pack-" + proc.stdout.decode("ascii", "replace").split()[-1]
        _move_in(incoming / "pack", objects / "pack", name)
    _packs(objects).add(git_dir, name)


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


@contextlib.contextmanager
def _incoming(objects: Path) -> Iterator[Path]:
    """An empty incoming store of this process in the store `objects`, flowd's alone (no lane
    can write the store); given back for the next take-in when the body ends well, removed when
    it raises (git refused, or stopped half way: what it wrote is never moved in)."""
    key = (os.getpid(), objects)
    with _IDLE_GUARD:
        idle = _IDLE.setdefault(key, [])
        store = idle.pop() if idle else None
    if store is None:
        # The first of this process in the store removes what a gone flowd left (base/leftovers.py).
        store = leftovers.made(INCOMING, objects)
        (store / "pack").mkdir()
    try:
        yield store
    except BaseException:
        shutil.rmtree(store, ignore_errors=True)
        raise
    with _IDLE_GUARD:
        _IDLE[key].append(store)


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
