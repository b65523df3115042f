"""Repository-relative path arithmetic: the ONLY place flowd decides whether a path lies in a perimeter.

Every perimeter question (validation, the perimeter gate, the task-owns gate, editor diagnostics)
goes through these few functions so they can never disagree. Paths are strings with `/` separators
relative to the repository root; nothing here touches the file system.
"""

from __future__ import annotations

import re

_DRIVE = re.compile(r"^[A-Za-z]:")
_LEADING_DOT_SLASH = re.compile(r"^(?:\./)+")
# `src/x/*` and `src/x/**` name everything under `src/x`: read them as the prefix `src/x`.
_GLOB_TAIL = re.compile(r"(?:^|/)\*\*?$")


def normalize(path: str) -> str:
    """Trim, use `/`, drop leading `./` runs and trailing slashes. `./` becomes `""`; `.` stays `.`."""
    p = path.replace("\\", "/")
    while True:
        # Loop to a fixed point so `normalize` is idempotent even for `./ a/ /`.
        q = _LEADING_DOT_SLASH.sub("", p.strip()).rstrip("/")
        if q == p:
            return p
        p = q


def as_prefix(path: str) -> str:
    """The prefix a perimeter entry names: normalized, with a glob tail (`/*`, `/**`) dropped."""
    p = normalize(path)
    while True:
        stripped = _GLOB_TAIL.sub("", p)
        if stripped == p:
            return p
        p = stripped.rstrip("/")


def within(path: str, prefix: str) -> bool:
    """Is `path` at or under `prefix`? Segment-aware: `src/a` does not contain `src/ab`.

    An empty prefix contains everything (it can only come from a glob like `**`; validation
    rejects empty perimeter entries before they get here).
    """
    p = normalize(path)
    q = as_prefix(prefix)
    return q == "" or p == q or p.startswith(q + "/")


def overlapping(a: str, b: str) -> bool:
    """Does one perimeter entry contain the other?"""
    pa, pb = as_prefix(a), as_prefix(b)
    return within(pa, pb) or within(pb, pa)


def within_any(path: str, prefixes: list[str]) -> bool:
    return any(within(path, prefix) for prefix in prefixes)


def unsafe_reason(path: str) -> str | None:
    """Why a path may not name part of a repository, or None when it is safe.

    Unsafe: empty (after normalizing, so `./` too), `.` (it names no file or folder a story could
    own), absolute (`/x`, `\\x`, `C:...`), or climbing out with a `..` segment.
    """
    raw = path.strip()
    if raw.startswith(("/", "\\")) or _DRIVE.match(raw):
        return "is absolute; use a path relative to the repository root"
    p = normalize(raw)
    if as_prefix(p) == "":
        return "is empty; name a file or folder relative to the repository root"
    if p == ".":
        return "is '.', which names nothing; name a file or folder relative to the repository root"
    if ".." in p.split("/"):
        return "contains '..'; name a path inside the repository"
    return None


def is_safe(path: str) -> bool:
    return unsafe_reason(path) is None


def looks_like_file(path: str) -> bool:
    """A last segment ending in `.` plus 1-5 letters or digits (`app.py`, `README.md`)."""
    return re.search(r"\.[A-Za-z0-9]{1,5}$", normalize(path).rsplit("/", 1)[-1]) is not None
