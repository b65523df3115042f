"""`.worktreeinclude`: which of the user's ignored files a new worktree gets (docs/worktree-bootstrap.md).

Pure: the lines are gitignore syntax and git itself matches them (`gitops.Repo.ignored_matching`);
this module only finds the patterns that try to reach outside the repository, so a bad file is
one sentence before anything is touched. The caller says what exists, so no file system is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


@dataclass(frozen=True)
class Escape:
    """A pattern that names something outside the repository, with the fix."""

    line: int  # 1-based
    pattern: str
    why: str
    fix: str


def pattern_of(raw: str) -> str | None:
    """The pattern a line holds, without a leading `!` (None: a blank line or a comment)."""
    text = raw.rstrip("\r\n")
    if not text.strip() or text.startswith("#"):
        return None
    text = text.rstrip(" \t") if not text.endswith("\\ ") else text
    return text[1:] if text.startswith("!") else text


def escapes(
    text: str,
    repo_root: str,
    *,
    at_root: Callable[[str], bool],
    on_disk: Callable[[str], bool],
) -> list[Escape]:
    """The patterns of a `.worktreeinclude` text that reach outside the repository at `repo_root`.

    `..` anywhere, `~` and drive letters always do. A leading `/` anchors a pattern at the
    repository root (gitignore's rule), unless its first segment is no entry of the repository
    (`at_root`) but is a folder of the file system's root (`on_disk`): then it is read as the
    absolute path it looks like (`/home/me/secrets/.env`).
    """
    found: list[Escape] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        pattern = pattern_of(raw)
        if pattern is None:
            continue
        body = pattern.lstrip("\\")
        fix = "list only paths inside the repository, relative to its root"
        if ".." in body.replace("\\", "/").split("/"):
            found.append(Escape(number, pattern, "reaches outside the repository with `..`", fix))
        elif body.startswith("~") or _DRIVE.match(body):
            found.append(Escape(number, pattern, "names a path outside the repository", fix))
        elif body.startswith("/"):
            first = body.lstrip("/").split("/", 1)[0]
            if first and not at_root(first) and on_disk(first):
                inside = _relative_to(body, repo_root)
                if inside is not None:
                    found.append(
                        Escape(number, pattern, "is an absolute path", f"write it as `/{inside}` instead")
                    )
                else:
                    found.append(Escape(number, pattern, "is an absolute path outside the repository", fix))
    return found


def _relative_to(path: str, root: str) -> str | None:
    try:
        rel = PurePosixPath(path).relative_to(PurePosixPath(root))
    except ValueError:
        return None
    return str(rel) if str(rel) != "." else None


def describe(file: str, escape: Escape) -> str:
    """One sentence naming the file, the line and the fix."""
    return f"{file}:{escape.line}: `{escape.pattern}` {escape.why}; {escape.fix}"
