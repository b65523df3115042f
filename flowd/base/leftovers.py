"""Folders a flowd process makes for itself, named for its pid (`<prefix><pid>-XXXXXXXX`), and
the ones a killed process left behind: the first folder a process makes with a prefix in a
parent removes those of a process that is gone, and, where a name carries no pid (a folder of an
older flowd), those older than an hour. A live process's folders, this user's or another's, are
never touched; a gone process's of another user's cannot be (its folder is private).

Made for flowd's temp folders (the index copies and scratch stores of its own commits, in the
system's temp dir) and the take-in's incoming stores (flowd/vcs/incoming.py): a flowd killed in
the middle (a crash, `kill -9`, a test that stops a run) leaves them, nothing else would remove
them, and a temp dir is where every confined start looks for sockets (flowd/sandbox/sockets.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

STALE_S = 3600  # a folder whose name says no pid: an older flowd's, removed once this old
PID_MAX = 1 << 22  # Linux's largest pid: a longer number in a name is no pid of ours
_SWEPT: set[tuple[int, str, str]] = set()
# Held while a process sweeps: no folder of its own is made meanwhile (a sweep takes a folder
# named for this pid, made before this process made any, for an earlier process's).
_GUARD = threading.Lock()


def made(prefix: str, parent: Path | None = None) -> Path:
    """A new folder `<parent>/<prefix><pid>-XXXXXXXX` (`parent`: the system's temp dir), after
    this process's first sweep of `parent` for `prefix`."""
    where = parent if parent is not None else Path(tempfile.gettempdir())
    first_of(prefix, where)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where))


@contextlib.contextmanager
def folder(prefix: str) -> Iterator[Path]:
    """`made(prefix)` for the body, removed after it (a temp dir that a killed process's next
    flowd removes)."""
    path = made(prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def first_of(prefix: str, where: Path) -> None:
    """Sweep `where` for `prefix` (`sweep`) when this process has not yet."""
    key = (os.getpid(), prefix, str(where))
    with _GUARD:
        if key in _SWEPT:
            return
        _SWEPT.add(key)
        sweep(where, prefix)


def sweep(where: Path, prefix: str) -> None:
    """Remove the folders named `<prefix>…` in `where` that a gone process left (module docstring)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(where):
            if name.startswith(prefix) and stale(name.removeprefix(prefix), where / name):
                shutil.rmtree(where / name, ignore_errors=True)


def stale(rest: str, path: Path) -> bool:
    """Whether the folder `path`, its name `rest` after the prefix, is a gone process's."""
    owner = rest.partition("-")[0]
    if owner.isdigit() and 0 < int(owner) <= PID_MAX:
        if int(owner) == os.getpid():
            return True  # an earlier process's with this pid: this one has made none there yet
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # alive, another user's
        return False
    try:
        return os.lstat(path).st_mtime < time.time() - STALE_S
    except OSError:
        return False
