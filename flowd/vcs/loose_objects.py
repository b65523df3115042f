"""Loose objects read from a store a lane wrote, and the pack flowd hands git (docs/sandbox.md
"Big objects").

A loose object's file is read in chunks and inflated no further than its header says, hashed as
it comes: a small file that inflates to gigabytes is refused at its first byte too many, and no
object is ever read whole on the lane's word. A commit, tree or tag is held (the take-in reads
them: the index, the submodules' routes), up to `HELD_OTHER`; a blob only up to `HELD_BLOB`, and
only while the take-in holds less than `HELD_TOTAL`. A blob not held is read again when the pack
is written, into an unnamed file beside the store rather than memory, and checked then (its
name, its type, its length): what reaches git is what was hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from flowd.base.fsio import open_regular
from flowd.vcs.incoming import Refused

HELD_BLOB = 1 << 20  # a bigger blob goes from its file to the pack, never whole in memory
HELD_TOTAL = 64 << 20  # past this many bytes held by one take-in, every further blob does too
HELD_OTHER = 64 << 20  # a bigger commit, tree or tag is refused (git's own are far smaller)
TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
_CHUNK = 1 << 16
_HEADER_MAX = 64  # "commit 18446744073709551615\0" and room to spare

Loose = tuple[str, str, bytes, bytes | None]  # (fan-out dir, file, type, body or None: not held)


@dataclass
class Held:
    """The bytes of objects one take-in holds in memory (`HELD_TOTAL`)."""

    size: int = 0


@contextlib.contextmanager
def opened(dir_fd: int, name: str, where: Path) -> Iterator[BinaryIO]:
    """The regular file `name` in the directory `dir_fd`, opened without following a link."""
    try:
        handle = open_regular(name, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"{where} in its object store cannot be read ({exc.strerror})") from exc
    if handle is None:
        raise Refused(f"{where} in its object store is not a file")
    with handle:
        yield handle


class _Inflate:
    """One loose object's file, inflated in bounded chunks and hashed as it comes."""

    def __init__(self, handle: BinaryIO, name: str, where: Path) -> None:
        self.handle, self.name, self.where = handle, name, where
        self.stream = zlib.decompressobj()
        self.hash = (hashlib.sha1 if len(name) == 40 else hashlib.sha256)()
        self.pending = b""

    def refuse(self, why: str) -> Refused:
        return Refused(f"the object {self.name} in its object store is {why} ({self.where})")

    def more(self, limit: int) -> bytes:
        """Up to `limit` more inflated bytes; b"" at the stream's end (or the file's)."""
        try:
            while not self.stream.eof:
                raw = self.stream.unconsumed_tail or self.handle.read(_CHUNK)
                if not raw:
                    return b""
                data = self.stream.decompress(raw, limit)
                if data:
                    return data
        except zlib.error as exc:
            raise self.refuse(f"corrupt ({exc})") from exc
        return b""

    def header(self) -> tuple[bytes, int]:
        """(type, size) from the object's header; `pending` holds what came after it."""
        data = b""
        while b"\0" not in data and len(data) < _HEADER_MAX:
            chunk = self.more(_HEADER_MAX)
            if not chunk:
                break
            data += chunk
        head, nul, self.pending = data.partition(b"\0")
        kind, _, size = head.partition(b" ")
        if not nul or kind not in TYPES or not size.isdigit() or (size[:1] == b"0" and size != b"0"):
            raise self.refuse("malformed")
        self.hash.update(head + b"\0")
        return kind, int(size)

    def body(self, size: int) -> Iterator[bytes]:
        """The body in chunks, exactly `size` bytes, then the check: the stream ends there, with
        nothing after it, and the object hashes to its name."""
        left = size
        chunk, self.pending = self.pending, b""
        while True:
            if len(chunk) > left:
                raise self.refuse("longer than its header says")
            if chunk:
                self.hash.update(chunk)
                left -= len(chunk)
                yield chunk
            if not left:
                break
            chunk = self.more(min(left + 1, _CHUNK))
            if not chunk:
                raise self.refuse("shorter than its header says")
        if self.more(1) or not self.stream.eof or self.stream.unused_data or self.handle.read(1):
            raise self.refuse("longer than its header says, or has data after it")
        if self.hash.hexdigest() != self.name:
            raise Refused(
                f"the object {self.name} in its object store does not hash to its name ({self.where})"
            )


def read(dir_fd: int, name: str, full: str, where: Path, held: Held) -> tuple[bytes, bytes | None]:
    """(type, body) of the loose object `full` (its file `name` in `dir_fd`), checked to hash to
    its name; body None for a blob not held (module docstring), checked when it is packed."""
    with opened(dir_fd, name, where) as handle:
        inflate = _Inflate(handle, full, where)
        kind, size = inflate.header()
        if kind == b"blob" and (size > HELD_BLOB or held.size + size > HELD_TOTAL):
            return kind, None
        if size > HELD_OTHER:
            raise inflate.refuse(f"a {kind.decode()} of {size} bytes, more than flowd takes in")
        body = b"".join(inflate.body(size))
        held.size += size
        return kind, body


# A blob not held, read again from its store for the pack: (size, its body in chunks).
BlobReader = Callable[[Loose], contextlib.AbstractContextManager[tuple[int, Iterator[bytes]]]]


@contextlib.contextmanager
def blob_at(dir_fd: int, name: str, full: str, where: Path) -> Iterator[tuple[int, Iterator[bytes]]]:
    """The blob `full` read again from its file: its size and body, checked as `read` checks
    (the file may have changed since: what is packed is what is hashed here)."""
    with opened(dir_fd, name, where) as handle:
        inflate = _Inflate(handle, full, where)
        kind, size = inflate.header()
        if kind != b"blob":
            raise inflate.refuse("changed while flowd read it")
        yield size, inflate.body(size)


def pack(loose: list[Loose]) -> bytes:
    """A version 2 pack of whole (undeltified) objects, every body held: git recomputes every
    name from it."""
    parts = [b"PACK", struct.pack(">II", 2, len(loose))]
    for _, _, kind, body in loose:
        assert body is not None, "a blob not held is packed by `spooled`"
        parts += [_entry_head(TYPES[kind], len(body)), zlib.compress(body, 1)]
    data = b"".join(parts)
    return data + _trailer(loose)(data).digest()


def _trailer(loose: list[Loose]) -> Callable[..., hashlib._Hash]:
    """The hash of a pack's trailer: the repository's own, which its object names' length says
    (a SHA-256 repository's git reads a pack closed by a SHA-1 as cut short)."""
    return hashlib.sha256 if loose and len(loose[0][0] + loose[0][1]) == 64 else hashlib.sha1


@contextlib.contextmanager
def packed(loose: list[Loose], blob: BlobReader, spool: Path) -> Iterator[bytes | BinaryIO]:
    """`pack(loose)` when every body is held; else the pack written into an unnamed file in
    `spool` (gone when closed, even if flowd is killed), blobs not held read through `blob`."""
    if all(body is not None for *_, body in loose):
        yield pack(loose)
        return
    with tempfile.TemporaryFile(dir=spool) as out:
        digest = _trailer(loose)()

        def put(data: bytes) -> None:
            digest.update(data)
            out.write(data)

        put(b"PACK" + struct.pack(">II", 2, len(loose)))
        for item in loose:
            _, _, kind, body = item
            if body is not None:
                put(_entry_head(TYPES[kind], len(body)) + zlib.compress(body, 1))
                continue
            with blob(item) as (size, chunks):
                put(_entry_head(TYPES[kind], size))
                squeeze = zlib.compressobj(1)
                for chunk in chunks:
                    put(squeeze.compress(chunk))
                put(squeeze.flush())
        out.write(digest.digest())
        out.flush()
        out.seek(0)
        yield out


def _entry_head(code: int, size: int) -> bytes:
    """A pack entry's type and size, git's variable-length encoding."""
    byte = (code << 4) | (size & 0x0F)
    size >>= 4
    head = bytearray()
    while size:
        head.append(byte | 0x80)
        byte, size = size & 0x7F, size >> 7
    head.append(byte)
    return bytes(head)
