"""Worktree bootstrap (docs/worktree-bootstrap.md): a new story or task worktree gets the user's
ignored files that `.worktreeinclude` matches, and its lane a port range of its own.

Git decides what matches (`Repo.ignored_matching`); only files git ignores in the user's checkout
AND in the new worktree are copied, so `git add -A` (every flowd commit) and the perimeter's
listing of untracked files never see them. Symlinks: a relative link that stays inside the
repository is recreated as it is; any other link is copied as the file it points to (a snapshot:
the worktree never links out of itself), and a link to a folder or to nothing is skipped.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flowd.base.errors import InputError
from flowd.engine.core.ports import LanePorts, ceiling_problem
from flowd.store.config import Settings
from flowd.vcs.gitops import Repo, mark_bootstrapped
from flowd.vcs.worktreeinclude import describe, escapes

if TYPE_CHECKING:
    from flowd.engine.context import RunContext


@dataclass
class Copied:
    """What a worktree got from the user's checkout, and what it could not get (path, why)."""

    copied: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def include_path(repo: Repo, settings: Settings) -> Path:
    return repo.root / settings.worktree.include


def check_include(repo: Repo, settings: Settings) -> None:
    """Pre-flight: a pattern reaching outside the repository is one InputError naming the file and line."""
    path = include_path(repo, settings)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"could not read {path}: {exc.strerror or exc}; fix its permissions") from exc

    @functools.cache
    def tracked_roots() -> set[str]:  # asked only for a pattern that looks absolute
        return {f.split("/", 1)[0] for f in repo.tracked_files()}

    found = escapes(
        text,
        str(repo.root),
        at_root=lambda name: os.path.lexists(repo.root / name) or name in tracked_roots(),
        on_disk=lambda name: os.path.isdir(os.path.join(os.sep, name)),
    )
    if found:
        raise InputError(describe(str(path), found[0]))


def preflight(repo: Repo, settings: Settings, concurrency: int) -> None:
    """`flowd run`'s checks before anything is touched: `.worktreeinclude` stays inside the
    repository, the lanes that may run at once (stories × parallel tasks) fit under port 65535,
    and git can check out a worktree at all (Git LFS set up without git-lfs cannot)."""
    lfs = repo.lfs_problem()
    if lfs is not None:
        raise InputError(lfs)
    check_include(repo, settings)
    lanes = concurrency * settings.task_concurrency
    problem = ceiling_problem(settings.worktree.port_base, settings.worktree.ports_per_lane, lanes)
    if problem is not None:
        config = repo.root / ".flow" / "config.toml"
        raise InputError(
            f"{config}: [worktree] portBase/portsPerLane: {problem}; lower portBase or portsPerLane"
        )


def bootstrap_files(repo: Repo, settings: Settings, worktree: Path) -> Copied:
    """Copy the matching ignored files of the user's checkout into `worktree` (see the module doc)."""
    include = include_path(repo, settings)
    if not include.is_file():
        return Copied()
    wanted = repo.ignored_matching(include)
    # Ignored there too, or a later `git add -A` would commit it (its .gitignore differs).
    ignored_there = repo.ignored_among(worktree, wanted)
    out = Copied()
    for rel in wanted:
        if rel not in ignored_there:
            out.skipped.append(
                (
                    rel,
                    "not ignored in the worktree (tracked there, or its .gitignore differs from your checkout's)",
                )
            )
            continue
        why = _copy_one(repo.root, worktree, rel)
        if why is None:
            out.copied.append(rel)
        else:
            out.skipped.append((rel, why))
    mark_bootstrapped(worktree, out.copied)
    return out


def _copy_one(src_root: Path, worktree: Path, rel: str) -> str | None:
    """Copy one file (None), or say why not. A file the worktree already has identical is kept."""
    src, dest = src_root / rel, worktree / rel
    parent = dest.parent
    if not _inside(parent, worktree):
        return "its folder in the worktree leads outside the worktree"
    if dest.is_dir() and not dest.is_symlink():
        return "the worktree has a folder there"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            return _copy_link(src_root, src, dest)
        if not src.is_file():
            return "not a regular file"
        _write_copy(src, dest)
    except OSError as exc:
        return f"could not copy: {exc.strerror or exc}"
    return None


def _copy_link(src_root: Path, src: Path, dest: Path) -> str | None:
    target = os.readlink(src)
    resolved = Path(os.path.realpath(src))
    if not os.path.isabs(target) and _inside(resolved, src_root):
        if dest.is_symlink() and os.readlink(dest) == target:
            return None
        _remove(dest)
        os.symlink(target, dest)
        return None
    if not resolved.is_file():
        return "a symlink to a folder or to nothing outside the repository"
    _write_copy(resolved, dest)
    return None


def _write_copy(src: Path, dest: Path) -> None:
    """`dest` becomes a copy of `src`, written aside and renamed (never half-written)."""
    if dest.is_file() and not dest.is_symlink() and _same_content(src, dest):
        return
    temp = dest.with_name(f".{dest.name}.flowd-copy")
    try:
        shutil.copy2(src, temp, follow_symlinks=True)
        _remove(dest)
        os.replace(temp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def _same_content(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    return a.read_bytes() == b.read_bytes()


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()


def _inside(path: Path, root: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def describe_prepared(ports: LanePorts, copied: Copied) -> str:
    """A line for the trace's Info: what the worktree got, and what it could not."""
    files = f"{len(copied.copied)} file(s) from your checkout" if copied.copied else "no files"
    line = f"worktree prepared: {files}, ports {ports.ports}"
    if copied.skipped:
        line += "; not copied: " + ", ".join(f"{p} ({why})" for p, why in copied.skipped[:5])
    return line


def prepare_lane(ctx: RunContext, key: str, lane: str, worktree: Path) -> tuple[LanePorts, Copied]:
    """Give the lane `key` (a story id, or `<story>#t<n>` for a parallel task) its port range and
    copy the user's matching ignored files into its worktree; blocking (run it in a thread)."""
    ports = ctx.ports.take(key, lane)
    return ports, bootstrap_files(ctx.repo, ctx.settings, worktree)


def bootstrap_epic(repo: Repo, settings: Settings, epic_wt: Path) -> str | None:
    """The epic worktree gets the same files (its gates run the story gates' commands after each
    merge); returns a line for the trace, or None when there was nothing to copy."""
    copied = bootstrap_files(repo, settings, epic_wt)
    if not copied.copied and not copied.skipped:
        return None
    line = f"epic worktree: {len(copied.copied)} file(s) from your checkout"
    if copied.skipped:
        line += "; not copied: " + ", ".join(f"{p} ({why})" for p, why in copied.skipped[:5])
    return line
