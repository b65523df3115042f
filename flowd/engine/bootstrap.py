"""Worktree bootstrap (docs/worktree-bootstrap.md): a new story or task worktree gets the user's
ignored files that `.worktreeinclude` matches, and its lane a port range of its own.

Git decides what matches (`Repo.ignored_matching`); only files git ignores in the user's checkout
AND in the new worktree are copied, so `git add -A` (every flowd commit) and the perimeter's
listing of untracked files never see them. Symlinks: a relative link that stays inside the
repository is recreated as it is; any other link is copied as the file it points to (a snapshot:
the worktree never links out of itself), and a link to a folder or to nothing is skipped.

A copy is a reflink clone where the file system can make one (a lane writing it changes only its
own blocks), else an in-kernel copy; never a hard link, which a lane could write through into the
user's file (docs/worktree-bootstrap.md, "How fast").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flowd.base.errors import InputError
from flowd.base.fsio import open_regular
from flowd.engine.core.ports import SlotPorts, ceiling_problem
from flowd.store.config import Settings
from flowd.vcs.bootstrapped import mark_bootstrapped
from flowd.vcs.gitops import Repo
from flowd.vcs.worktreeinclude import describe, escapes

if TYPE_CHECKING:
    from flowd.engine.context import RunContext

_COMPARE_CHUNK = 1 << 20  # a copy compared with its source this much at a time


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


def check_worktree_root(repo: Repo, root: Path) -> None:
    """The folder the run's worktrees go in (`root`) can be made and written, asked of the kernel
    without touching anything (`access`: mode bits, ACLs, a read-only mount, an immutable
    folder); else one sentence. It was found only when the epic's worktree was made, and the run
    ended with an internal error."""
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_dir() and os.access(probe, os.W_OK | os.X_OK):
        return
    why = "is not a folder" if not probe.is_dir() else "is not writable"
    config = repo.root / ".flow" / "config.toml"
    raise InputError(
        f"cannot make the run's worktrees in {root}: {probe} {why}; make it writable, or set "
        f"worktreeRoot in {config} to a folder you can write (docs/running.md)"
    )


def bootstrap_files(repo: Repo, settings: Settings, worktree: Path) -> Copied:
    """Copy the matching ignored files of the user's checkout into `worktree` (see the module doc)."""
    include = include_path(repo, settings)
    if not include.is_file():
        return Copied()
    wanted = repo.ignored_matching(include)
    copier = _Copier(repo.root, worktree)
    # A folder that leads out of the worktree (a link a lane left there) is never copied into,
    # and git is not asked about what lies beyond it (it refuses the whole question).
    astray = {rel for rel in wanted if not copier.parent_ok(os.path.dirname(os.path.join(copier.dest, rel)))}
    # Ignored there too, or a later `git add -A` would commit it (its .gitignore differs).
    ignored_there = repo.ignored_among(worktree, [rel for rel in wanted if rel not in astray]) | astray
    eligible = [rel for rel in wanted if rel in ignored_there]
    outcome = {rel: copier.copy_one(rel) for rel in eligible}
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
        why = outcome[rel]
        if why is None:
            out.copied.append(rel)
        else:
            out.skipped.append((rel, why))
    mark_bootstrapped(worktree, out.copied)
    return out


FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int), the reflink ioctl of btrfs, XFS, bcachefs…
# What a file system without clones (or a clone across file systems) answers FICLONE with.
NO_CLONE = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}
# What copy_file_range answers where it cannot copy between these two files (shutil's fallback).
NO_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EBADF}


class _Copier:
    """One preparation's copies. What it learns (folders made or checked, whether the file system
    clones) serves its next files: on a 20,000-file tree the system calls per file are the cost."""

    def __init__(self, src_root: Path, worktree: Path) -> None:
        self.src_root, self.worktree = src_root, worktree
        self.clones: bool | None = None  # unknown until the first file is copied
        self._inside: dict[str, bool] = {}
        self._made: set[str] = set()
        self._src, self.dest = str(src_root), str(worktree)

    def copy_one(self, rel: str) -> str | None:
        """Copy one file (None), or say why not. A file the worktree already has identical is kept."""
        # Plain strings, not Path objects: on a 20,000-file tree their making shows in the time.
        src, dest = os.path.join(self._src, rel), os.path.join(self.dest, rel)
        parent = os.path.dirname(dest)
        if not self.parent_ok(parent):
            return "its folder in the worktree leads outside the worktree"
        there = _lstat(dest)
        if there is not None and stat.S_ISDIR(there.st_mode):
            return "the worktree has a folder there"
        try:
            if parent not in self._made:
                os.makedirs(parent, exist_ok=True)
                self._made.add(parent)
            found = _lstat(src)
            mode = found.st_mode if found is not None else 0
            if stat.S_ISLNK(mode):
                return self._copy_link(Path(src), Path(dest), there)
            if not stat.S_ISREG(mode):
                return "not a regular file"
            self._write_copy(src, dest, there)
        except OSError as exc:
            return f"could not copy: {exc.strerror or exc}"
        return None

    def parent_ok(self, parent: str) -> bool:
        known = self._inside.get(parent)
        if known is None:
            known = self._inside[parent] = _inside(Path(parent), self.worktree)
        return known

    def _copy_link(self, src: Path, dest: Path, there: os.stat_result | None) -> str | None:
        target = os.readlink(src)
        resolved = Path(os.path.realpath(src))
        if not os.path.isabs(target) and _inside(resolved, self.src_root):
            if there is not None and stat.S_ISLNK(there.st_mode) and os.readlink(dest) == target:
                return None
            _remove(dest)
            os.symlink(target, dest)
            return None
        if not resolved.is_file():
            return "a symlink to a folder or to nothing outside the repository"
        self._write_copy(str(resolved), str(dest), there)
        return None

    def _write_copy(self, src: str, dest: str, there: os.stat_result | None) -> None:
        """`dest` becomes a copy of `src` (its bytes, mode, times and extended attributes, as
        `shutil.copy2`), written aside and renamed over it (never half-written)."""
        if there is not None and stat.S_ISREG(there.st_mode) and _same_content(Path(src), Path(dest)):
            return
        head, name = os.path.split(dest)
        temp = os.path.join(head, f".{name}.flowd-copy")
        source = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(source)
            # A new file of flowd's own: a link a lane planted at the temp name is removed, never
            # followed (the rename below replaces one at `dest` the same way: docs/sandbox.md).
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(temp, flags, 0o600)
            try:
                self._fill(source, out, st.st_size)
                _copy_xattrs(source, out)
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
                os.chmod(out, stat.S_IMODE(st.st_mode))
            finally:
                os.close(out)
            os.replace(temp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        finally:
            os.close(source)

    def _fill(self, source: int, out: int, size: int) -> None:
        """`out` (empty) gets `source`'s bytes: a reflink clone if the file system can, else an
        in-kernel copy (copy_file_range, then sendfile), else read and write."""
        if self.clones is not False and size > 0:
            try:
                fcntl.ioctl(out, FICLONE, source)
                self.clones = True
                return
            except OSError as exc:
                if exc.errno not in NO_CLONE:
                    raise
                if self.clones is None:
                    self.clones = False  # the first answer stands for the whole preparation
        _copy_range(source, out)


def _copy_range(source: int, out: int) -> None:
    try:
        while os.copy_file_range(source, out, 1 << 30):
            pass
        return
    except OSError as exc:
        if exc.errno not in NO_RANGE:
            raise
    os.lseek(source, 0, os.SEEK_SET)
    os.lseek(out, 0, os.SEEK_SET)
    os.ftruncate(out, 0)
    while chunk := os.read(source, 1 << 20):
        os.write(out, chunk)


def _copy_xattrs(source: int, out: int) -> None:
    """As `shutil.copystat`: extended attributes the target cannot take are left out."""
    try:
        names = os.listxattr(source)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.ENODATA, errno.EINVAL):
            return
        raise
    for name in names:
        try:
            os.setxattr(out, name, os.getxattr(source, name))
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.ENODATA, errno.EINVAL, errno.EACCES):
                raise


def _lstat(path: str | Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def clone_support(src_dir: Path, dest_dir: Path) -> bool:
    """Whether a file of `src_dir` can be cloned into `dest_dir` (a probe with a scratch file)."""
    probe = src_dir / f".flowd-clone-probe.{os.getpid()}"
    copy = dest_dir / probe.name
    try:
        probe.write_bytes(b"probe")
        with open(probe, "rb") as source, open(copy, "wb") as out:
            fcntl.ioctl(out.fileno(), FICLONE, source.fileno())
        return True
    except OSError:
        return False
    finally:
        for path in (probe, copy):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _same_content(a: Path, b: Path) -> bool:
    """Whether the lane's copy `b` holds `a`'s bytes: `b` opened without following a link (a lane
    may have put one there since it was looked at), both compared a chunk at a time (a copied
    file can be gigabytes)."""
    with contextlib.ExitStack() as close:
        try:
            ours = open_regular(a, follow=True)
            if ours is None:
                return False
            close.enter_context(ours)
            theirs = open_regular(b)
            if theirs is None:
                return False
            close.enter_context(theirs)
        except OSError:
            return False
        if os.fstat(ours.fileno()).st_size != os.fstat(theirs.fileno()).st_size:
            return False
        while True:
            chunk = ours.read(_COMPARE_CHUNK)
            if chunk != theirs.read(_COMPARE_CHUNK):
                return False
            if not chunk:
                return True


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()


def _inside(path: Path, root: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def describe_prepared(ports: SlotPorts, copied: Copied) -> str:
    """A line for the trace's Info: what the worktree got, and what it could not."""
    files = f"{len(copied.copied)} file(s) from your checkout" if copied.copied else "no files"
    line = f"worktree prepared: {files}, ports {ports.ports}"
    if copied.skipped:
        line += "; not copied: " + ", ".join(f"{p} ({why})" for p, why in copied.skipped[:5])
    return line


def prepare_lane(ctx: RunContext, key: str, lane: str, worktree: Path) -> tuple[SlotPorts, Copied]:
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
