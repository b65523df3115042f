"""Cheap fingerprints of the places lanes must not write (docs/sandbox-detection.md): files kept
with their bytes (so they can be put back), directories by their entries, refs read straight from
the ref store, and worktrees by their `git status`. Reading only: putting back is
`engine/detect.py`'s.
"""

from __future__ import annotations

import bisect
import os
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from flowd.base.fsio import open_regular
from flowd.vcs import loose_refs, packed_refs
from flowd.vcs.gitcli import GitDirChanged, git_env, pin_of

KEEP_BYTES = 1 << 20  # files up to this size are kept whole, so they can be put back


@dataclass(frozen=True)
class FilePrint:
    """A file as it was: `None` fields when it did not exist."""

    ino: int | None
    size: int | None
    mtime_ns: int | None
    mode: int | None
    data: bytes | None  # the bytes, when small enough to keep

    @property
    def exists(self) -> bool:
        return self.ino is not None


MISSING = FilePrint(None, None, None, None, None)


def print_file(path: Path, before: FilePrint | None = None) -> FilePrint:
    """A file's fingerprint; its bytes are read again only when its stat moved since `before`."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return MISSING
    if not stat.S_ISREG(st.st_mode):
        return FilePrint(st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, None)
    if before is not None and (before.ino, before.size, before.mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    ):
        return before
    data = None
    if st.st_size <= KEEP_BYTES:
        try:
            # The file the stat saw: no link or FIFO swapped in since is read through or waited on.
            handle = open_regular(path)
            if handle is not None:
                with handle:
                    if os.fstat(handle.fileno()).st_ino == st.st_ino:
                        data = handle.read(KEEP_BYTES + 1)
        except OSError:
            data = None
        if data is not None and len(data) > KEEP_BYTES:
            data = None  # it grew past the limit since the stat: a prefix would put back a torn file
    return FilePrint(st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, data)


def same(a: FilePrint, b: FilePrint) -> bool:
    """Whether two prints are the same content (a touched but unchanged file is the same)."""
    if a.exists != b.exists:
        return False
    if not a.exists:
        return True
    if a.data is not None and b.data is not None:
        return a.data == b.data and a.mode == b.mode
    return (a.ino, a.size, a.mtime_ns, a.mode) == (b.ino, b.size, b.mtime_ns, b.mode)


def changed_at(path: Path, now: FilePrint) -> float | None:
    """When a change happened: the file's mtime, or for a removal its nearest directory's."""
    if now.mtime_ns is not None:
        return now.mtime_ns / 1e9
    for parent in path.parents:
        try:
            return os.stat(parent).st_mtime_ns / 1e9
        except OSError:
            continue
    return None


def files_under(root: Path, depth: int = 2) -> list[Path]:
    """Every file (or symlink) under `root`, `depth` levels down at most."""
    out: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return out
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if depth > 1:
                out.extend(files_under(Path(entry.path), depth - 1))
        else:
            out.append(Path(entry.path))
    return out


# -- refs ---------------------------------------------------------------------------------------
class RefPrint(NamedTuple):
    """A ref's value and the file it was read from. A tuple: a repository's 100,000 packed refs
    are made into prints once per version of packed-refs, and a frozen dataclass cost 2 µs each."""

    sha: str
    where: Path  # the loose ref file, or packed-refs


@dataclass(frozen=True)
class RefStore:
    """Every ref of the repository as git reads them, the loose files over packed-refs. The
    packed part is shared by every read of one version of packed-refs (`is` tells it did not
    change): a repository with 100,000 refs is looked at after every lane step, and what can have
    changed there is its loose refs (flowd/vcs/packed_refs.py)."""

    packed: packed_refs.Packed
    packed_prints: Mapping[str, RefPrint]
    loose: dict[str, RefPrint]

    def get(self, name: str) -> RefPrint | None:
        return self.loose.get(name) or self.packed_prints.get(name)

    def starting(self, prefix: str) -> list[str]:
        """The names under `prefix`, sorted."""
        names = self.packed.names
        i = bisect.bisect_left(names, prefix)
        found = {n for n in self.loose if n.startswith(prefix)}
        while i < len(names) and names[i].startswith(prefix):
            found.add(names[i])
            i += 1
        return sorted(found)

    def as_dict(self) -> dict[str, RefPrint]:
        return {**self.packed_prints, **self.loose}


def read_refs(common_dir: Path) -> dict[str, RefPrint]:
    """Every ref of the repository: packed-refs, then the loose files over them (git's order)."""
    return read_ref_store(common_dir).as_dict()


def read_ref_store(common_dir: Path) -> RefStore:
    """`read_refs`, its packed part kept apart (`RefStore`)."""
    loose = {
        name: RefPrint(text, common_dir / name)
        for name, text in loose_refs.read(common_dir).items()
        if text and not text.startswith("ref:")  # a symbolic ref names another: not a value
    }
    packed = packed_refs.read(common_dir)
    return RefStore(packed, _packed_prints(common_dir, packed), loose)


# The packed refs as prints, for the version of packed-refs they were made from.
_PRINTS: dict[str, tuple[packed_refs.Packed, dict[str, RefPrint]]] = {}


def _packed_prints(common_dir: Path, packed: packed_refs.Packed) -> dict[str, RefPrint]:
    known = _PRINTS.get(str(common_dir))
    if known is not None and known[0] is packed:
        return known[1]
    where = common_dir / "packed-refs"
    prints = {name: RefPrint(sha, where) for name, sha in packed.shas.items()}
    _PRINTS[str(common_dir)] = (packed, prints)
    return prints


def read_ref(common_dir: Path, name: str) -> RefPrint | None:
    """One ref, as `read_refs` would give it: its loose file, else its line in packed-refs."""
    path = common_dir / name
    try:
        sha = path.read_text(encoding="utf-8", errors="surrogateescape").strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        sha = ""
    except OSError:
        return None
    if sha and not sha.startswith("ref:"):
        return RefPrint(sha, path)
    packed = packed_refs.read(common_dir).shas.get(name)
    return RefPrint(packed, common_dir / "packed-refs") if packed is not None else None


def unlogged_move(common_dir: Path, name: str) -> str | None:
    """The sha git's reflog says `name` was last set to, when the ref now holds another one
    that no git command logged (a ref file written directly); None when they agree, the ref has
    no reflog, or git is moving it right now (docs/sandbox-detection.md "Story branches").

    git appends to the reflog before it renames `<ref>.lock` over the ref, so between the two
    they disagree; read around the lock so that moment is never taken for a write."""
    log = common_dir / "logs" / name
    try:
        last = log.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1].split(b" ", 2)
    except OSError:
        return None
    logged = last[1].decode("ascii", "replace") if len(last) == 3 else ""
    before = read_ref(common_dir, name)
    locked = (common_dir / f"{name}.lock").exists()
    after = read_ref(common_dir, name)
    if not logged or locked or before is None or after is None or before.sha != after.sha:
        return None
    return logged if after.sha != logged else None


def ref_changed_at(common_dir: Path, name: str, now: RefPrint | None) -> float | None:
    where = now.where if now is not None else common_dir / name
    return changed_at(where, print_file(where))


# -- worktrees ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One path `git status` lists, with its code and stat."""

    code: str
    mtime_ns: int | None
    size: int | None


def status(wt: Path) -> dict[str, Entry] | None:
    """The worktree's changed and untracked paths (None: it is gone or git failed).

    `--no-optional-locks`: a fingerprint must never take the index lock of a checkout in use."""
    try:
        proc = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "-z", "--no-renames", "-uall"],
            cwd=wt,
            env=git_env(pin=pin_of(wt)),  # flowd's own git: pinned, nothing in a config runs
            capture_output=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, GitDirChanged):
        return None  # a worktree whose admin files were rewritten: `vcs/admin.py` reports it
    if proc.returncode != 0:
        return None
    out: dict[str, Entry] = {}
    for raw in proc.stdout.split(b"\0"):
        if len(raw) < 4:
            continue
        rel = os.fsdecode(raw[3:])
        if rel == ".flow" or rel.startswith(".flow/"):
            continue
        try:
            st = os.stat(wt / rel, follow_symlinks=False)
            out[rel] = Entry(raw[:2].decode(), st.st_mtime_ns, st.st_size)
        except OSError:
            out[rel] = Entry(raw[:2].decode(), None, None)
    return out


def head_file(git_dir: Path) -> bytes:
    try:
        return (git_dir / "HEAD").read_bytes()
    except OSError:
        return b""
