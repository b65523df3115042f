"""flowd moving one branch of your repository the way git does, without a git process: the
take-in of a lane's own commit moves the story branch this way once its objects are in
(docs/sandbox.md "How objects come in"). git's protocol for a loose ref: `<ref>.lock` made with
`O_EXCL` (no other writer), the new value written there, the reflogs appended, then the lock
renamed over the ref; the old value checked under the lock (git's `update-ref <ref> <new> <old>`).
A ref git would keep elsewhere (the `reftable` backend) is not moved here (`files_backend`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.vcs.gitcli import run_git

_IDENTS: dict[str, str] = {}
_GUARD = threading.Lock()
_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def files_backend(extensions: str) -> bool:
    """Whether a repository whose `extensions.*` config lines are `extensions` keeps its refs as
    files (git's default; `extensions.refStorage = reftable` does not)."""
    return "refstorage" not in extensions.lower()


@contextlib.contextmanager
def locked(
    common: Path, ref: str, old: str, read: Callable[[], str | None]
) -> Iterator[Callable[[str, str, list[Path]], None] | None]:
    """Hold `<ref>.lock` while the body works; yields None (nothing held) when another writer
    holds it or the ref no longer names `old` (`read`: its value now, loose or packed, as the
    caller reads refs). The body calls what it is given with the new
    value, the reflog message and the other reflogs to append to (the worktree `HEAD` that names
    the branch), which moves the ref; a body that raises, or never calls it, leaves the ref as it was."""
    path = common / ref
    lock = path.with_name(path.name + ".lock")
    try:
        fd = _create(lock)
    except OSError:
        yield None
        return
    moved = False
    try:
        if read() != old:
            yield None
            return

        def move(new: str, message: str, logs: list[Path]) -> None:
            nonlocal moved
            with contextlib.suppress(OSError):  # the branch keeps its file's mode (a shared repository's)
                os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
            os.write(fd, f"{new}\n".encode("ascii"))
            line = f"{old} {new} {_ident(common)} {_now()}\t{message}\n".encode("utf-8", "replace")
            for log in [common / "logs" / ref, *logs]:
                _append(log, line)
            os.replace(lock, path)
            moved = True

        yield move
    finally:
        os.close(fd)
        if not moved:
            with contextlib.suppress(OSError):
                os.unlink(lock)


def _create(lock: Path) -> int:
    """The lock, its folders made first as git makes them (a branch only in `packed-refs` may
    have none left)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(lock, flags, 0o666)  # the umask's mode, as git's own lock
    except FileNotFoundError:
        lock.parent.mkdir(parents=True, exist_ok=True)
        return os.open(lock, flags, 0o666)


def _append(log: Path, line: bytes) -> None:
    """One reflog line, to a reflog that exists (one git never made is not made here)."""
    try:
        fd = os.open(log, _LOG_FLAGS)
    except OSError:
        return
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _ident(common: Path) -> str:
    """`Name <email>` as git's own reflog lines of this repository say it (`git var`, once)."""
    key = str(common)
    with _GUARD:
        known = _IDENTS.get(key)
    if known is None:
        try:
            said = run_git(common, ["var", "GIT_COMMITTER_IDENT"], "").stdout.strip()
        except FlowdError:
            said = ""  # no identity configured: git's own reflog line would name the user@host
        known = said.rsplit(" ", 2)[0] if said.count(" ") >= 2 else "flowd <flowd@localhost>"
        with _GUARD:
            _IDENTS[key] = known
    return known


def _now() -> str:
    return f"{int(time.time())} {time.strftime('%z')}"
