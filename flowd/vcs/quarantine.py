"""A lane's own object store, and flowd taking a lane's objects in (docs/sandbox.md "The quarantine").

A lane's processes run with `GIT_OBJECT_DIRECTORY` naming a store inside the lane's private git
dir (`<common>/worktrees/<name>/flowd-objects/`) and the repository's own store as a read-only
alternate: `git add`/`git commit` write there, and no lane can delete, overwrite or add to an
object, pack or `info/` file of the shared store. flowd, unconfined, takes what a lane wrote
into the shared store when it takes the lane's work:

- the quarantine is read by flowd itself, file by file, each opened relative to a directory it
  opened without following links (`O_NOFOLLOW`): nothing a lane wrote there is a pointer flowd
  follows (an `info/alternates` in it is never read, a link planted in it is refused);
- every loose object must hash to its name (the name's length says SHA-1 or SHA-256) and be of
  a known type, read in chunks and never whole on the lane's word (flowd/vcs/loose_objects.py:
  a big blob goes from its file to the pack); the objects go to git as one pack, `git
  index-pack --strict`, which checks each object is well formed and every object it names
  exists (in the pack or the repository): a disconnected commit, a tree naming a missing blob,
  a malformed commit are refused and nothing is written (flowd/vcs/incoming.py); a pack a lane
  left in its store (a `git gc` there) goes through the same;
- what was taken in is then removed from the quarantine, the same way (relative to directories
  opened without following links), so the next take-in reads only what is new.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from flowd.base import leftovers
from flowd.base.fsio import open_regular, put_back
from flowd.vcs.gitcli import alternates, git_env, small_file
from flowd.vcs.incoming import Refused, feed
from flowd.vcs.loose_objects import Held, Loose, blob_at, opened, packed, read

QUARANTINE_DIR = "flowd-objects"
_HEX = frozenset("0123456789abcdef")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def quarantine(admin: Path) -> Path:
    """The quarantine of the worktree whose private git dir is `admin`."""
    return admin / QUARANTINE_DIR


def lane_env(admin: Path, common_dir: Path) -> dict[str, str]:
    """What a confined lane process's git reads and writes objects through: the quarantine, the
    repository's store and the stores of the worktree's submodules (a `git commit` run inside a
    submodule writes into the quarantine too; flowd takes those objects to the submodule's own
    store, `take_in`)."""
    stores = [common_dir / "objects", *(s / "objects" for s in submodule_dirs(admin))]
    return {
        "GIT_OBJECT_DIRECTORY": str(quarantine(admin)),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": alternates(stores),
    }


def submodule_dirs(admin: Path) -> list[Path]:
    """The git dirs of the worktree's checked-out submodules (`<admin>/modules/<path>`, nested
    ones in theirs), real directories only: a link a lane put there is not followed."""
    found: list[Path] = []
    for top, dirs, files in os.walk(admin / "modules"):  # never follows links
        here = Path(top)
        if "HEAD" in files and "objects" in dirs and not (here / "objects").is_symlink():
            found.append(here)
            dirs[:] = [d for d in dirs if d == "modules"]
    return found


def prepare(admin: Path) -> None:
    """Make the quarantine (git does not make its object directory itself). A link or file a
    lane put in its place is not followed here; confinement removes it before its next process
    starts (docs/sandbox.md "Links a lane planted")."""
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.mkdir(quarantine(admin), 0o755)


def reader_env(admin: Path) -> dict[str, str]:
    """For flowd's own git reading a lane's commits before they are taken in (a live perimeter
    check during a turn): the quarantine as an alternate of the repository's store, only while
    it is a real directory with no alternates of its own."""
    q = quarantine(admin)
    try:
        if not stat.S_ISDIR(os.lstat(q).st_mode) or os.path.lexists(q / "info" / "alternates"):
            return {}
    except OSError:
        return {}
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": alternates([q])}


@dataclass
class _Found:
    loose: list[Loose] = field(default_factory=list)  # new: to check and take in
    packs: list[str] = field(default_factory=list)  # new `pack-*.pack` names in `pack/`
    taken: list[tuple[str, str]] = field(default_factory=list)  # loose ones taken in before
    taken_packs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.loose or self.packs)


@dataclass(frozen=True)
class TakenIn:
    names: frozenset[str]  # the loose objects taken in (a pack's objects are not listed)
    packs: tuple[str, ...] = ()  # the packs taken in, by file name
    # The repository's commits and trees among them, by name: what flowd/vcs/index_reset.py
    # reads a worktree's index from (read here, hashed; checked by `index-pack` since).
    held: Mapping[str, bytes] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.names or self.packs)


def take_in(
    common_dir: Path, admin: Path, already: frozenset[str] = frozenset(), remove: bool = True
) -> TakenIn:
    """Check and move what the lane's quarantine holds into the repository's store (module
    docstring). Raises `Refused` when anything fails the check; nothing is taken then.

    `already`: what an earlier take-in of this step took (object names, pack file names), not
    taken again. `remove` False (a take-in while the lane's processes run): what is taken stays
    in the quarantine, where the lane's git may be reading it, until the step's last take-in."""
    q = quarantine(admin)
    try:
        top = os.open(q, _DIR_FLAGS)
    except FileNotFoundError:
        return TakenIn(frozenset())
    except OSError as exc:
        raise Refused(f"its object store {q} is not a directory of its own ({exc.strerror})") from exc
    try:
        found = _scan(top, q, already)
        if not found:
            if remove:
                _remove(top, found)
            return TakenIn(frozenset())
        names = frozenset(f"{d}{f}" for d, f, _, _ in found.loose)
        # Packs first: a lane's `git repack` packs its older objects, which newer loose ones name.
        for name in found.packs:
            with _lane_pack(top, name, q) as handle:
                feed(common_dir, handle, q)
        routes = _routes(found.loose, admin)
        ours = [o for o in found.loose if not any(o in r for r in routes.values())]
        if ours:
            _feed_loose(common_dir, ours, top, q, ahead=True)
        for git_dir, theirs in routes.items():
            _feed_loose(git_dir, theirs, top, q)
        if remove:
            _remove(top, found)
        held = {d + f: body for d, f, kind, body in ours if kind in (b"commit", b"tree") and body is not None}
        return TakenIn(names, tuple(found.packs), held)
    finally:
        os.close(top)


@contextlib.contextmanager
def scratch(common_dir: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A store of flowd's own (a temp dir, the repository's store as its alternate) and the
    environment that makes git write new objects there: where flowd's own git hashes what a lane
    wrote (`git add` of its worktree, `write-tree`), so that nothing of it reaches the
    repository's store but through `take_in_scratch`. Removed on the way out."""
    tmp = leftovers.made("flowd-objects-")
    env = {
        "GIT_OBJECT_DIRECTORY": str(tmp),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": alternates([common_dir / "objects"]),
    }
    try:
        yield tmp, env
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def take_in_scratch(common_dir: Path, store: Path) -> int:
    """Check and move what flowd's own git wrote into `store` (`scratch`) into the repository's
    store, as `take_in` does a lane's (`--strict`: a `.gitmodules` naming a command, a malformed
    tree are refused and nothing is written); how many objects came in. Raises `Refused`."""
    top = os.open(store, _DIR_FLAGS)
    try:
        found = _scan(top, store, frozenset())
        for name in found.packs:
            with _lane_pack(top, name, store) as handle:
                feed(common_dir, handle, store)
        if found.loose:
            _feed_loose(common_dir, found.loose, top, store)
        return len(found.loose)
    finally:
        os.close(top)


def _feed_loose(git_dir: Path, loose: list[Loose], top: int, q: Path, *, ahead: bool = False) -> None:
    """The loose objects `loose` of the store `q` (open as `top`) to git as one pack, in memory or
    spooled beside `git_dir`'s store (flowd/vcs/loose_objects.py); `ahead` as `feed`'s (a lane's
    commits into the repository's store: the next take-in's git started after this one)."""

    @contextlib.contextmanager
    def blob(item: Loose) -> Iterator[tuple[int, Iterator[bytes]]]:
        d, f = item[0], item[1]
        with _sub(top, d, q) as fd, blob_at(fd, f, d + f, q / d / f) as size_and_body:
            yield size_and_body

    with packed(loose, blob, git_dir / "objects") as data:
        feed(git_dir, data, q, ahead=ahead)


def _scan(top: int, q: Path, already: frozenset[str]) -> _Found:
    found = _Found()
    held = Held()  # what this take-in holds in memory (flowd/vcs/loose_objects.py)
    for entry in sorted(os.listdir(top)):
        if entry == "pack":
            packs = _packs(top, q)
            found.packs = [p for p in packs if p not in already]
            found.taken_packs = [p for p in packs if p in already]
        elif len(entry) == 2 and set(entry) <= _HEX:
            for name, got in _loose_dir(top, entry, q, already, held):
                if got is None:
                    found.taken.append((entry, name))
                else:
                    found.loose.append((entry, name, *got))
    return found


@contextlib.contextmanager
def _sub(top: int, name: str, q: Path) -> Iterator[int]:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=top)
    except OSError as exc:
        raise Refused(f"{q / name} in its object store is not a directory ({exc.strerror})") from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _loose_dir(
    top: int, entry: str, q: Path, already: frozenset[str], held: Held
) -> Iterator[tuple[str, tuple[bytes, bytes | None] | None]]:
    """(file name, (type, body)) of each loose object in `entry` (body None: a blob not held);
    None for one taken before."""
    with _sub(top, entry, q) as fd:
        for name in sorted(os.listdir(fd)):
            if name.startswith("tmp_obj_"):
                continue  # an object git is writing (or was, when the step ended): not an object yet
            full = entry + name
            if len(full) not in (40, 64) or not set(name) <= _HEX:
                raise Refused(f"{q / entry / name} in its object store is not an object")
            if full in already:
                yield name, None
            else:
                yield name, read(fd, name, full, q / entry / name, held)


def _routes(loose: list[Loose], admin: Path) -> dict[Path, list[Loose]]:
    """The objects a submodule's own git wrote into the quarantine, by submodule: what its HEAD
    reaches among them. The rest belongs to the repository."""
    routes: dict[Path, list[Loose]] = {}
    if not loose or not os.path.isdir(admin / "modules"):
        return routes
    by_name = {d + f: o for o in loose for d, f in [o[:2]]}
    for git_dir in submodule_dirs(admin):
        head = _head_of(git_dir)
        reached = _reach([head] if head else [], by_name)
        if reached:
            routes[git_dir] = [by_name[n] for n in sorted(reached)]
    return routes


def _head_of(git_dir: Path) -> str | None:
    """The commit a submodule's git dir's HEAD names (the lane's git writes there): its files read
    as data (`small_file`: no link, no FIFO, 64 KiB), a branch only below its `refs/`."""
    head = small_file(git_dir / "HEAD")
    if head is not None and head.startswith("ref: refs/"):
        ref = head.removeprefix("ref: ")
        head = None if ".." in ref.split("/") else small_file(git_dir / ref)
    return head if head is not None and len(head) in (40, 64) and set(head) <= _HEX else None


def _reach(tips: list[str], by_name: dict[str, Loose]) -> set[str]:
    """The quarantine's objects `tips` reach (commits' trees and parents, trees' entries other
    than submodule links, tags' objects)."""
    seen: set[str] = set()
    todo = [t for t in tips if t in by_name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        _, _, kind, body = by_name[name]
        todo.extend(n for n in _links(kind, body, len(name) // 2) if n in by_name and n not in seen)
    return seen


def _links(kind: bytes, body: bytes | None, width: int) -> list[str]:
    if body is None:
        return []  # a blob not held (blobs name nothing)
    if kind == b"tree":
        out, at = [], 0
        while at < len(body):
            nul = body.find(b"\0", at)
            if nul < 0:
                break
            if not body[at:nul].startswith(b"160000 "):
                out.append(body[nul + 1 : nul + 1 + width].hex())
            at = nul + 1 + width
        return out
    if kind in (b"commit", b"tag"):
        head = body.split(b"\n\n", 1)[0].decode("utf-8", "replace").splitlines()
        return [line.split(" ", 1)[1] for line in head if line.startswith(("tree ", "parent ", "object "))]
    return []


def _packs(top: int, q: Path) -> list[str]:
    with _sub(top, "pack", q) as fd:
        return sorted(n for n in os.listdir(fd) if n.startswith("pack-") and n.endswith(".pack"))


@contextlib.contextmanager
def _lane_pack(top: int, name: str, q: Path) -> Iterator[BinaryIO]:
    """A pack the lane's git left in its store, open for git to read (never read whole here)."""
    with _sub(top, "pack", q) as fd, opened(fd, name, q / "pack" / name) as handle:
        yield handle


def _remove(top: int, found: _Found) -> None:
    """Remove what was taken in, never through a link (each name relative to its directory)."""
    by_dir: dict[str, list[str]] = {}
    for d, f in [(o[0], o[1]) for o in found.loose] + found.taken:
        by_dir.setdefault(d, []).append(f)
    for d, files in by_dir.items():
        with contextlib.suppress(OSError), _sub(top, d, Path(d)) as fd:
            for f in files:
                with contextlib.suppress(OSError):
                    os.unlink(f, dir_fd=fd)
        with contextlib.suppress(OSError):
            os.rmdir(d, dir_fd=top)
    if found.packs or found.taken_packs:
        with contextlib.suppress(OSError), _sub(top, "pack", Path("pack")) as fd:
            for name in found.packs + found.taken_packs:
                stem = name.removesuffix(".pack")
                for suffix in (".idx", ".rev", ".bitmap", ".keep", ".promisor", ".mtimes", ".pack"):
                    with contextlib.suppress(OSError):
                        os.unlink(stem + suffix, dir_fd=fd)


def held(admin: Path) -> int:
    """How many objects (loose ones, and packs) the quarantine of `admin` holds; read without
    following a link (a link in its place, or in it, counts for nothing)."""
    q = quarantine(admin)
    if not os.path.isdir(q) or os.path.islink(q):
        return 0
    count = 0
    for top, dirs, files in os.walk(q):  # follows no link to a folder
        name = os.path.basename(top)
        if len(name) == 2 and set(name) <= _HEX:
            count += len(files)
        elif name == "pack":
            count += sum(1 for f in files if f.endswith(".pack"))
        dirs[:] = [d for d in dirs if d == "pack" or (len(d) == 2 and set(d) <= _HEX)]
    return count


def discard(admin: Path) -> None:
    """Throw away a quarantine flowd refused (its objects are never taken in). `shutil.rmtree`
    walks by file descriptor on Linux and does not follow links; a link in the quarantine's
    place is removed as a link."""
    import shutil

    q = quarantine(admin)
    try:
        mode = os.lstat(q).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(q, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(q)


def missing(common_dir: Path, names: list[str]) -> list[str]:
    """Which of `names` the repository's store does not hold (its own store, no alternates)."""
    if not names:
        return []
    env = git_env()
    for name in ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"):
        env.pop(name, None)
    proc = subprocess.run(
        ["git", "--git-dir", str(common_dir), "cat-file", "--batch-check=%(objectname)"],
        input="".join(f"{n}\n" for n in names),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return [line.split()[0] for line in proc.stdout.splitlines() if line.endswith(" missing")]


_OBJECT_NAME = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
# A reflog bigger than this is not read to be cleaned (a lane's git writes it; git's own are
# kilobytes, 400,000 entries would be 64 MiB): flowd never holds what a lane chose the size of.
REFLOG_MAX = 64 << 20


def drop_missing_entries(common_dir: Path, log: Path) -> bool:
    """Drop from the reflog `log` every entry whose old or new value names an object the
    repository's store does not hold (what a refused lane committed: `git fsck` calls such an
    entry invalid). The file is read without following a link, written anew and renamed over it
    (a link or hard link there is replaced, never written through); a folder on the way that is a
    link is left alone. False when it could not be done, or the file is bigger than `REFLOG_MAX`."""
    if os.path.realpath(log.parent) != os.path.normpath(log.parent):
        return False
    try:
        handle = open_regular(log)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if handle is None:
        return False
    with handle:
        if os.fstat(handle.fileno()).st_size > REFLOG_MAX:
            return False
        lines = handle.read(REFLOG_MAX + 1).splitlines(keepends=True)
    named = {
        n for line in lines for n in line.split(b" ", 2)[:2] if _OBJECT_NAME.fullmatch(n) and n.strip(b"0")
    }
    gone = {n.encode() for n in missing(common_dir, sorted(n.decode("ascii", "replace") for n in named))}
    kept = [line for line in lines if not gone.intersection(line.split(b" ", 2)[:2])]
    if len(kept) == len(lines):
        return True
    return put_back(log, b"".join(kept))
