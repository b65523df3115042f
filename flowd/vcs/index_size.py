"""The size of the user's checkout from git's index, without git (docs/repositories.md "Big
repositories"): how many files it tracks (the index's header: one 12-byte read, about 10 µs),
and, for a big one, the disk a whole checkout of them takes: each entry's recorded size rounded
up to the file system's block (25,000 files of a few hundred bytes take 100 MB on a 4 KiB-block
ext4, where their sizes add up to 8 MB). Reading every entry of a 25,000-file index takes about
45 ms, so only a big checkout is read through.

Index versions 2, 3 and 4 (git's `Documentation/gitformat-index.txt`); an index this does not
read (another version, a split index's shared part, a damaged file) gives None and the run
chooses nothing for itself.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_HEADER = struct.Struct(">4sII")
_EXTENDED = 0x4000


def index_entries(git_dir: Path) -> int | None:
    """How many entries the index of the checkout whose git dir is `git_dir` holds."""
    try:
        with open(Path(git_dir) / "index", "rb") as f:
            head = f.read(_HEADER.size)
    except OSError:
        return None
    if len(head) < _HEADER.size:
        return None
    signature, version, count = _HEADER.unpack(head)
    return count if signature == b"DIRC" and version in (2, 3, 4) else None


def checkout_disk_bytes(git_dir: Path, common_dir: Path, block: int | None = None) -> int | None:
    """The disk one whole checkout of the index's files takes: each file's size (as the index
    recorded it at its last refresh) rounded up to `block` (the file system's, by default)."""
    path = Path(git_dir) / "index"
    try:
        data = path.read_bytes()
        block = block or os.statvfs(path).f_bsize or 4096
    except OSError:
        return None
    try:
        sizes = _entry_sizes(data, _hash_size(Path(common_dir)))
    except (struct.error, ValueError, IndexError):
        return None
    return None if sizes is None else sum(-(-s // block) * block if s else block for s in sizes)


def _hash_size(common_dir: Path) -> int:
    """20 bytes (SHA-1), or 32 in a repository made with `--object-format=sha256`."""
    try:
        config = (common_dir / "config").read_text(encoding="utf-8", errors="replace").lower()
    except OSError:
        return 20
    return 32 if "objectformat = sha256" in config.replace("\t", " ").replace("  ", " ") else 20


def _entry_sizes(data: bytes, hash_size: int) -> list[int] | None:
    signature, version, count = _HEADER.unpack_from(data, 0)
    if signature != b"DIRC" or version not in (2, 3, 4):
        return None
    sizes: list[int] = []
    offset = _HEADER.size
    flags_at = 40 + hash_size
    for _ in range(count):
        (size,) = struct.unpack_from(">I", data, offset + 36)
        (flags,) = struct.unpack_from(">H", data, offset + flags_at)
        name = offset + flags_at + 2 + (2 if version >= 3 and flags & _EXTENDED else 0)
        if version == 4:  # the name: a varint (bytes dropped from the previous name), then the rest
            while data[name] & 0x80:
                name += 1
            offset = data.index(b"\0", name + 1) + 1
        else:  # the name NUL-terminated, the entry padded to a multiple of 8 bytes
            end = data.index(b"\0", name)
            offset += (end - offset + 8) // 8 * 8
        sizes.append(size)
    return sizes
