"""Your repository's loose refs (`refs/…` files), each read again only when it may have changed
(docs/repositories.md "Many refs"). A clone that fetched many branches holds thousands of them:
flowd read every file twice per lane step (detection's look at your refs, a lane repository's
copy of them), and with 20,000 a 4-story epic took 40 times as long.

Each file is known by its identity (inode, size, modification and change times) as of when it
was read, and read again when that changed, or when it had changed too shortly before that read
to tell a later write apart (git's "racily clean" rule: a file's times tick coarsely, so a write
in the same tick as the read leaves them as they were): a file is trusted only once its times are
a second older than the read that saw them. A lane that writes a ref file of yours in place
(where it may: detection's modes) changes its change time, which it cannot set back.

Read as data: every folder opened without following a link, every file a regular one (a link is
named, not followed); names starting with `.` and git's `<ref>.lock` files are no refs (git
reads neither).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
RACY_NS = 1_000_000_000  # how much older than its read a file's times must be to be trusted


def settled(mtime_ns: int, ctime_ns: int, read_ns: int) -> bool:
    """Whether what a read at `read_ns` saw of a file with these times still holds while they
    stay the same: they were a second older than the read (git's racily-clean rule)."""
    return max(mtime_ns, ctime_ns) < read_ns - RACY_NS


class _Known:
    __slots__ = ("key", "read_ns", "text")

    def __init__(self, key: tuple[int, int, int, int], read_ns: int, text: str) -> None:
        self.key, self.read_ns, self.text = key, read_ns, text

    def trusted(self, key: tuple[int, int, int, int]) -> bool:
        return key == self.key and settled(key[2], key[3], self.read_ns)


_CACHE: dict[str, dict[str, _Known]] = {}  # by common dir, by ref
_FOLDERS: dict[str, dict[str, _Folder]] = {}  # by common dir, by folder (`refs/remotes/origin`)
_GUARD = threading.Lock()


class _Folder:
    """A folder of refs as last listed: its identity then, its refs and its folders."""

    __slots__ = ("folders", "key", "read_ns", "refs")

    def __init__(self, key: tuple[int, int, int, int], read_ns: int) -> None:
        self.key, self.read_ns = key, read_ns
        self.refs: dict[str, _Known] = {}
        self.folders: list[str] = []


def read(common_dir: Path, *, exact: bool = True) -> dict[str, str]:
    """Every loose ref file of `common_dir` by name (`refs/heads/main`): its text, stripped (a
    commit's name, or `ref: …` for a symbolic ref, or whatever was written there; a link's
    target after `-> `). `exact` False: a folder whose identity did not change is taken as it
    was (git moves a ref by renaming a new file over it, which changes its folder; a write in
    place, which no git makes, is then seen only once the folder changes): a lane repository's
    copy of your refs, made at every step, where `exact` is detection's look."""
    with _GUARD:
        old = _CACHE.get(str(common_dir), {})
        folders = _FOLDERS.get(str(common_dir), {})
    new: dict[str, _Known] = {}
    seen: dict[str, _Folder] = {}
    try:
        top = os.open(common_dir / "refs", _DIR_FLAGS)
    except OSError:
        return {}
    try:
        _walk(top, "refs", old, new, None if exact else (folders, seen))
    finally:
        os.close(top)
    with _GUARD:
        if exact:
            _CACHE[str(common_dir)] = new
        else:
            _FOLDERS[str(common_dir)] = seen
    return {name: known.text for name, known in new.items()}


_Folders = tuple[dict[str, _Folder], dict[str, _Folder]]  # as last listed, and as listed now


def _walk(
    fd: int, prefix: str, old: dict[str, _Known], new: dict[str, _Known], folders: _Folders | None
) -> None:
    if folders is not None:
        st = os.fstat(fd)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = folders[0].get(prefix)
        if known is not None and known.key == key and settled(key[2], key[3], known.read_ns):
            folders[1][prefix] = known
            new.update(known.refs)
            for name in known.folders:
                _into(fd, name, f"{prefix}/{name}", old, new, folders)
            return
        here = _Folder(key, time.time_ns())
        folders[1][prefix] = here
    with os.scandir(fd) as entries:
        listed = list(entries)
    for entry in listed:
        name = entry.name
        if name.startswith(".") or name.endswith(".lock"):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        rel = f"{prefix}/{name}"
        if stat.S_ISDIR(st.st_mode):
            if folders is not None:
                here.folders.append(name)
            _into(fd, name, rel, old, new, folders)
        elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
            ref = _ref(fd, name, st, old.get(rel))
            if ref is not None:
                new[rel] = ref
                if folders is not None:
                    here.refs[rel] = ref


def _ref(fd: int, name: str, st: os.stat_result, known: _Known | None) -> _Known | None:
    """The ref file `name` in the folder `fd`: as `known` when that is still trusted, else read."""
    key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if known is not None and known.trusted(key):
        return known
    read_ns = time.time_ns()
    text = _text(fd, name) if stat.S_ISREG(st.st_mode) else _link(fd, name)
    return _Known(key, read_ns, text) if text is not None else None


def _into(
    fd: int, name: str, rel: str, old: dict[str, _Known], new: dict[str, _Known], folders: _Folders | None
) -> None:
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError:
        return
    try:
        _walk(sub, rel, old, new, folders)
    finally:
        os.close(sub)


def _link(fd: int, name: str) -> str | None:
    """A link where a ref file belongs (no git makes one; a lane may): its target, never
    followed, as the ref's text (no commit's name: every reader sees it as changed)."""
    try:
        return "-> " + os.readlink(name, dir_fd=fd)
    except OSError:
        return None


def _text(fd: int, name: str) -> str | None:
    try:
        leaf = os.open(name, _FILE_FLAGS, dir_fd=fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(leaf).st_mode):
            return None
        return os.read(leaf, 4096).decode("utf-8", "surrogateescape").strip()
    except OSError:
        return None
    finally:
        os.close(leaf)
