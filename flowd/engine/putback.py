"""Putting back what a lane changed where it must not (docs/sandbox-detection.md): a file from its
fingerprinted bytes, a ref to its old target, a worktree path from HEAD. `engine/detect.py`
decides when; each helper here says whether the place is as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.base.fsio import unlink_inside
from flowd.engine.fingerprint import Entry, FilePrint, RefPrint
from flowd.vcs.gitcli import git_env, pin_of


def safely(restore: Callable[[], bool]) -> bool:
    try:
        return restore()
    except (OSError, subprocess.SubprocessError, FlowdError):
        return False


def put_file_back(path: Path, before: FilePrint) -> bool:
    if not before.exists:
        if path.is_dir() and not path.is_symlink():
            return False
        path.unlink(missing_ok=True)
        return True
    if before.data is None:
        return False
    tmp = path.with_name(f".{path.name}.flowd-restore")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.unlink(missing_ok=True)  # a link a lane planted there goes, never followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(before.data)
        if before.mode is not None:
            os.fchmod(handle.fileno(), before.mode & 0o7777)
    os.replace(tmp, path)
    return True


def put_ref_back(common_dir: Path, name: str, before: RefPrint | None) -> bool:
    args = ["update-ref", name, before.sha] if before is not None else ["update-ref", "-d", name]
    proc = subprocess.run(
        ["git", f"--git-dir={common_dir}", *args],
        env=git_env(),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return proc.returncode == 0


def descends(common_dir: Path, new: str, old: str) -> bool:
    proc = subprocess.run(
        ["git", f"--git-dir={common_dir}", "merge-base", "--is-ancestor", old, new],
        env=git_env(),
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return proc.returncode == 0


def put_worktree_path_back(wt: Path, rel: str, entry: Entry) -> bool:
    if entry.code == "??":
        return unlink_inside(wt, rel)
    proc = subprocess.run(
        ["git", "restore", "--source=HEAD", "--staged", "--worktree", "--", rel],
        cwd=wt,
        env=git_env(pin=pin_of(wt)),  # pinned: never the git dir a lane's `.git` file names
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return proc.returncode == 0


def remove_path(path: Path) -> bool:
    """Remove what a lane made where nothing of anybody's lives (a placeholder worktree, engine/
    epic_worktree.py): a file or link, or a whole folder."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    return True
