"""A worktree's index read from a commit flowd holds in hand, without a git process: what
`git read-tree --reset <commit>` writes, for the take-in of a lane's own commit (docs/sandbox.md
"How objects come in").

The take-in read the lane's new commit and trees from its quarantine (each hashed to its name)
and `index-pack --strict` checked them; a tree the commit did not change is the one the index's
own cache tree (git's `TREE` extension) records at that path, so its entries are copied over as
they are. As git does, an entry whose object and mode did not change keeps its stat (a status
reads only the files the commit changed), a new one has none (a status reads it once), an entry
the old index holds racily (its file's time not older than the index) loses its size (a status
reads it again); the new index carries a full cache tree, so the next take-in reuses it too.

Whatever this does not read as git would is left to git (`reset` answers None, the caller runs
`git read-tree --reset`): a tree neither in hand nor in the cache tree, a version-4, split or
sparse index, an entry with extended flags (skip-worktree, intent-to-add) or a merge stage, a
required extension it does not know, a path git would refuse, an index of more than
`MAX_ENTRIES` entries (Python walks every entry; git is faster there: bench/quarantine.py).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base.fsio import open_regular

MAX_ENTRIES = 20_000
_LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_EXTENDED, _STAGE, _NAME = 0x4000, 0x3000, 0x0FFF
_DIR, _MODES = 0o40000, frozenset({0o100644, 0o100755, 0o120000, 0o160000})


class _NotHere(Exception):
    """This index or commit is git's to read (`reset` answers None)."""


@dataclass
class _Node:
    """One tree of the cache tree: its name in its parent, object, entries under it (-1: not
    valid) and the subtrees recorded under it."""

    name: bytes
    oid: bytes | None
    count: int
    subtrees: list[_Node] = field(default_factory=list)


@dataclass(frozen=True)
class Index:
    """An index file as read: its bytes and its time (git's racy-clean check reads against it)."""

    data: bytes
    mtime_ns: int


def read(index: Path) -> Index | None:
    """The index at `index` (not followed if a link), None when there is none."""
    try:
        handle = open_regular(index)
        if handle is None:
            return None
        with handle:
            return Index(handle.read(), os.fstat(handle.fileno()).st_mtime_ns)
    except OSError:
        return None


class Lock:
    """git's `index.lock` for `index`, made only when no git holds it (`FileExistsError`
    otherwise; `OSError` when it cannot be made): `install` puts a new index in place through it;
    closed without one, the index stays as it was."""

    def __init__(self, index: Path) -> None:
        self.index, self.path = index, index.with_name(index.name + ".lock")
        self.fd: int | None = os.open(self.path, _LOCK_FLAGS, 0o644)

    def install(self, data: bytes, mtime_ns: int | None = None) -> None:
        """Write `data` and rename it over the index (a link there is replaced, never written
        through); `mtime_ns`: the time the index keeps (one put back keeps its old time, so what
        was racy against it stays racy)."""
        assert self.fd is not None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
            if mtime_ns is not None:
                os.utime(self.fd, ns=(mtime_ns, mtime_ns))
            os.replace(self.path, self.index)
        except OSError:
            self.__exit__()
            raise
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:  # nothing installed: the lock is ours to remove
            os.close(self.fd)
            self.fd = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def reset(old: Index, commit: str, held: Mapping[str, bytes]) -> bytes | None:
    """The index `git read-tree --reset <commit>` would write over `old`, the commit and its
    changed trees read from `held` (object name -> body); None when git must read it (module
    docstring)."""
    width = len(commit) // 2
    body = held.get(commit)
    if body is None or not body.startswith(b"tree "):
        return None
    try:
        root = bytes.fromhex(body[5 : 5 + 2 * width].decode("ascii"))
        return _Reset(old, width, held).run(root)
    except (_NotHere, ValueError, IndexError, struct.error, RecursionError):
        return None


class _Reset:
    def __init__(self, old: Index, width: int, held: Mapping[str, bytes]) -> None:
        self.width, self.held, self.data = width, held, old.data
        self.racy_s = old.mtime_ns // 1_000_000_000
        self.version, self.paths, self.spans, tree = _entries(old.data, width)
        self.cache = _cache_tree(tree, width) if tree is not None else {}
        self.out: list[bytes] = []
        self.last = b""
        self.count = 0

    def run(self, root: bytes) -> bytes:
        top = self._tree(root, b"", b"")
        head = b"DIRC" + struct.pack(">II", self.version, self.count)
        tree = bytearray()
        _write_node(top, tree)
        data = b"".join([head, *self.out, b"TREE", struct.pack(">I", len(tree)), bytes(tree)])
        algo = hashlib.sha1 if self.width == 20 else hashlib.sha256
        return data + algo(data).digest()

    def _tree(self, oid: bytes, prefix: bytes, name: bytes) -> _Node:
        body = self.held.get(oid.hex())
        if body is None:
            return self._unchanged(oid, prefix)
        node = _Node(name, oid, 0)
        for mode, entry, sub in _tree_entries(body, self.width):
            if not _safe(entry):
                raise _NotHere
            path = prefix + entry
            if mode == _DIR:
                child = self._tree(sub, path + b"/", entry)
                node.subtrees.append(child)
                node.count += child.count
            elif mode in _MODES:
                self._file(path, mode, sub)
                node.count += 1
            else:
                raise _NotHere
        return node

    def _unchanged(self, oid: bytes, prefix: bytes) -> _Node:
        """A tree the commit did not change: its entries as the old index holds them."""
        node = self.cache.get(prefix)
        if node is None or node.oid != oid or node.count < 0:
            raise _NotHere
        start = bisect.bisect_left(self.paths, prefix)
        end = start + node.count
        if end > len(self.paths) or not all(self.paths[i].startswith(prefix) for i in (start, end - 1)):
            raise _NotHere
        if end < len(self.paths) and self.paths[end].startswith(prefix):
            raise _NotHere
        if node.count:
            self._order(self.paths[start])
            self.last = self.paths[end - 1]
        self.out.extend(self._kept(i) for i in range(start, end))
        self.count += node.count
        return node

    def _file(self, path: bytes, mode: int, oid: bytes) -> None:
        self._order(path)
        self.last = path
        self.count += 1
        at = bisect.bisect_left(self.paths, path)
        if at < len(self.paths) and self.paths[at] == path:
            start = self.spans[at]
            old_mode = struct.unpack_from(">I", self.data, start + 24)[0]
            if old_mode == mode and self.data[start + 40 : start + 40 + self.width] == oid:
                self.out.append(self._kept(at))
                return
        if len(path) >= _NAME:
            raise _NotHere
        stat = struct.pack(">10I", 0, 0, 0, 0, 0, 0, mode, 0, 0, 0)
        self.out.append(_padded(stat + oid + struct.pack(">H", len(path)) + path))

    def _kept(self, i: int) -> bytes:
        """Entry `i` of the old index as it is; its size dropped when it is racy (git smudges such
        an entry when it writes an index, so a status reads the file again)."""
        start, end = self.spans[i], self.spans[i + 1]
        mtime_s = struct.unpack_from(">I", self.data, start + 8)[0]
        if mtime_s < self.racy_s:
            return self.data[start:end]
        return self.data[start : start + 36] + b"\0\0\0\0" + self.data[start + 40 : end]

    def _order(self, path: bytes) -> None:
        if path <= self.last:  # git refuses a tree out of order; it is git's to say so
            raise _NotHere


def _entries(data: bytes, width: int) -> tuple[int, list[bytes], list[int], bytes | None]:
    """(version, paths, entry offsets plus the end's, the `TREE` extension) of an index git wrote;
    `_NotHere` for anything `reset` leaves to git."""
    if data[:4] != b"DIRC" or len(data) < 12 + width:
        raise _NotHere
    version, count = struct.unpack_from(">II", data, 4)
    algo = hashlib.sha1 if width == 20 else hashlib.sha256
    if version not in (2, 3) or count > MAX_ENTRIES or algo(data[:-width]).digest() != data[-width:]:
        raise _NotHere
    head = 40 + width + 2
    paths, spans, at = [], [], 12
    for _ in range(count):
        flags = struct.unpack_from(">H", data, at + head - 2)[0]
        length = flags & _NAME
        if flags & (_EXTENDED | _STAGE) or length == _NAME:
            raise _NotHere
        paths.append(data[at + head : at + head + length])
        spans.append(at)
        at += (head + length + 8) & ~7
    spans.append(at)
    tree = None
    while at < len(data) - width:
        sig, size = data[at : at + 4], struct.unpack_from(">I", data, at + 4)[0]
        if sig == b"TREE":
            tree = data[at + 8 : at + 8 + size]
        elif not b"A" <= sig[:1] <= b"Z":  # a required extension (a split or sparse index)
            raise _NotHere
        at += 8 + size
    return version, paths, spans, tree


def _cache_tree(data: bytes, width: int) -> dict[bytes, _Node]:
    """The cache tree's nodes by the path they stand for (b"" the root, b"a/b/" below)."""
    nodes: dict[bytes, _Node] = {}
    at = 0

    def node(prefix: bytes) -> _Node:
        nonlocal at
        nul = data.index(b"\0", at)
        name, at = data[at:nul], nul + 1
        line = data.index(b"\n", at)
        count, subtrees = (int(n) for n in data[at:line].split(b" "))
        at = line + 1
        oid = None
        if count >= 0:
            oid, at = data[at : at + width], at + width
        path = prefix + name + b"/" if name else prefix
        here = nodes[path] = _Node(name, oid, count)
        here.subtrees = [node(path) for _ in range(subtrees)]
        return here

    if data:
        node(b"")
    return nodes


def _tree_entries(body: bytes, width: int) -> Iterator[tuple[int, bytes, bytes]]:
    at = 0
    while at < len(body):
        space = body.index(b" ", at)
        nul = body.index(b"\0", space)
        yield int(body[at:space], 8), body[space + 1 : nul], body[nul + 1 : nul + 1 + width]
        at = nul + 1 + width


def _write_node(node: _Node, out: bytearray) -> None:
    out += node.name + b"\0" + f"{node.count} {len(node.subtrees)}\n".encode("ascii")
    if node.count >= 0 and node.oid is not None:
        out += node.oid
    for sub in node.subtrees:
        _write_node(sub, out)


def _padded(entry: bytes) -> bytes:
    """An entry (its fixed part, object, flags and path) with the NULs that end it on 8 bytes."""
    return entry + b"\0" * (((len(entry) + 8) & ~7) - len(entry))


def _safe(name: bytes) -> bool:
    """A name git's own checks take without a second look (a `.git` of any spelling NTFS or HFS
    read as one, a backslash, `.` and `..` are left to git, which refuses them)."""
    low = name.lower()
    if name in (b"", b".", b"..") or b"\\" in name or b"/" in name or b"\0" in name:
        return False
    if low.rstrip(b" .") == b".git" or low.startswith((b".git:", b"git~")):
        return False
    return name.isascii() or b"git" not in low
