"""Your repository's `packed-refs`, read once per version of the file (docs/repositories.md "Many
refs"). A repository with 100,000 tags and remote branches has a 6 MB `packed-refs`; flowd read
it whole twice per lane step (detection's look at your refs, the lane repository's copy of them)
and a 4-story epic took 8 times as long as without them. git rewrites the file by renaming a new
one over it, so its identity (device, inode, size, times) names a version: a version is parsed
once (trusted as loose refs are, flowd/vcs/loose_refs.py), and a lane repository's copy of the
refs is spliced from its lines.

Read as data: the file opened without following a link, a regular file or nothing.
"""

from __future__ import annotations

import bisect
import itertools
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flowd.base.fsio import open_regular
from flowd.vcs.loose_refs import settled

HEADER = "# pack-refs with: sorted \n"
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Packed:
    """One version of a `packed-refs`: its refs by name (peeled lines left out), and its lines
    sorted by name (git's order, what a `sorted` header promises)."""

    shas: Mapping[str, str]
    names: list[str]
    lines: list[str]  # "<sha> <name>\n", in the order of `names`


EMPTY = Packed({}, [], [])
_CACHE: dict[str, tuple[tuple[int, ...], int, Packed]] = {}  # by common dir: identity, read at, refs
_GUARD = threading.Lock()


def read(common_dir: Path) -> Packed:
    """The refs of `common_dir`'s `packed-refs` (EMPTY when it has none, or it is not a regular
    file), parsed again only when the file changed."""
    path = common_dir / "packed-refs"
    try:
        handle = open_regular(path)
    except OSError:
        return EMPTY
    if handle is None:
        return EMPTY
    with handle:
        st = os.fstat(handle.fileno())
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        with _GUARD:
            known = _CACHE.get(str(common_dir))
        # Trusted only when its times were a second older than the read that saw them: a write
        # in place in the same tick would leave them as they were (flowd/vcs/loose_refs.py).
        if known is not None and known[0] == key and settled(st.st_mtime_ns, st.st_ctime_ns, known[1]):
            return known[2]
        read_ns = time.time_ns()
        packed = _parse(handle.read().decode("utf-8", "surrogateescape"))
    with _GUARD:
        _CACHE[str(common_dir)] = (key, read_ns, packed)
    return packed


def _parse(text: str) -> Packed:
    shas: dict[str, str] = {}
    for line in text.splitlines():
        sha, _, name = line.partition(" ")
        if name.startswith("refs/") and len(sha) in (40, 64) and set(sha) <= _HEX:
            shas[name] = sha
    names = list(shas)
    if any(a > b for a, b in itertools.pairwise(names)):
        names.sort()  # a file some other tool wrote unsorted
    return Packed(shas, names, [f"{shas[n]} {n}\n" for n in names])


def view(packed: Packed, loose: Mapping[str, str], drop: str | None) -> bytes:
    """A sorted `packed-refs` of `packed`'s refs with the `loose` ones over them (git's order of
    precedence) and without `drop`: the packed lines kept as they are, the few that differ
    spliced in."""
    changed = {name: sha for name, sha in loose.items() if packed.shas.get(name) != sha}
    if drop is not None:
        changed[drop] = ""  # left out
    parts: list[str] = [HEADER]
    at = 0
    for name in sorted(changed):
        i = bisect.bisect_left(packed.names, name, lo=at)
        parts.extend(packed.lines[at:i])
        if changed[name]:
            parts.append(f"{changed[name]} {name}\n")
        at = i + 1 if i < len(packed.names) and packed.names[i] == name else i
    parts.extend(packed.lines[at:])
    return "".join(parts).encode("utf-8", "surrogateescape")
