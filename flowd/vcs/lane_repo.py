"""A confined lane's own git dir, the lane repository (docs/sandbox.md "The lane repository").

The worktree stays registered in your repository: flowd's own git keeps naming its admin dir
`<common>/worktrees/<id>` and its work tree (flowd/vcs/gitcli.py), and that admin dir, its
`HEAD`, `index` and reflogs, is flowd's alone. The lane's own git (an agent's `git commit`) works
in a small git dir beside it, `<admin>/flowd-git/`, which the worktree's `.git` file names: its own
`HEAD`, its own copy of the lane's branch `refs/heads/…`, its own index, reflogs and config (the
repository's config included by path), and for objects the lane's quarantine (flowd/vcs/quarantine.py,
through the environment confinement gives every lane process). The lane may write that git dir
and its quarantine, nothing of the repository's refs, reflogs or admin dir; so an agent's own
commit moves only the lane repository's branch, and no ref or index of yours names an object
the repository does not hold.

flowd moves the two in step, never running git on the lane repository (a lane writes its
config): `sync` writes it from the admin dir (its `HEAD`, the branch's value, the index bytes)
whenever flowd's side changed since it last did; `moved` reads the lane's branch as data, and
`adopt` takes a move in (after its objects are in the store, checked): flowd's git moves the
branch in your repository, old value checked, and reads its index from the new commit. What flowd
last wrote is recorded in the admin dir (`flowd-lane.json`), so a move is told from flowd's own
change across a crash too. After every step `renew` makes the lane repository anew (every entry
the lane wrote removed, flowd's written again): git processes other than flowd's (your shell
prompt's, your editor's) read it unconfined.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.base.fsio import open_regular, put_back, unlink_inside
from flowd.base.layout import LANE_GIT
from flowd.vcs import index_reset, loose_refs, packed_refs, ref_move
from flowd.vcs.gitcli import alternates, config_value, private_git_dir, run_git
from flowd.vcs.quarantine import QUARANTINE_DIR

RECORD = "flowd-lane.json"
REFLOG_ACTION = "flowd: the lane's own commit"
STORY_REFS = "refs/heads/story/"  # the only branches a lane's own commits move (a story's, a task's)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HEX = frozenset("0123456789abcdef")
_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()
_FORMAT: dict[str, tuple[str, str]] = {}  # each common dir's format version and extensions
_VIEWS: dict[str, tuple[str | None, bytes]] = {}  # the refs copy last written in each lane repository


def lane_git(admin: Path) -> Path:
    """The lane repository of the worktree whose admin dir is `admin`."""
    return admin / LANE_GIT


def active(admin: Path) -> bool:
    """Whether the worktree's lane has a lane repository (flowd made it: the admin dir, where it
    lies, is not the lane's to write)."""
    try:
        return stat.S_ISDIR(os.lstat(lane_git(admin)).st_mode)
    except OSError:
        return False


def dotgit_text(admin: Path) -> str:
    """What the worktree's `.git` file must say: the lane repository when there is one."""
    return f"gitdir: {lane_git(admin) if active(admin) else admin}\n"


@dataclass(frozen=True)
class Move:
    """The lane moved its branch (or its detached HEAD, `ref` None) from `old` to `new`."""

    ref: str | None
    old: str | None
    new: str


def _lock(admin: Path) -> threading.Lock:
    with _GUARD:
        return _LOCKS.setdefault(str(admin), threading.Lock())


def _is_name(text: str | None) -> bool:
    return text is not None and len(text) in (40, 64) and set(text) <= _HEX


def _read_at(root: Path, rel: str, limit: int = 4096) -> str | None:
    """The text of the file `rel` under `root`, every folder on the way opened without following
    a link (a lane's planted link leads nowhere here); None when it is not a regular file."""
    parts = rel.split("/")
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = open_regular(parts[-1], dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    if leaf is None:
        return None
    with leaf:
        return leaf.read(limit).decode("utf-8", "surrogateescape").strip()


def _write_at(root: Path, rel: str, data: bytes, times: tuple[int, int] | None = None) -> bool:
    """Write `data` as the file `rel` under `root` anew: each folder on the way made or opened
    without following a link (a link or file in a folder's place is removed, never followed), the
    file a temp one renamed over (a link at its name is replaced, never written through); `times`
    (access and modification, in ns) set on it before the rename."""
    parts = rel.split("/")
    try:
        fd = _open_folders(root, parts[:-1])
    except OSError:
        return False
    try:
        tmp = f".{parts[-1]}.flowd-sync"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=fd)
        out = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd
        )
        with os.fdopen(out, "wb") as handle:
            handle.write(data)
            if times is not None:
                handle.flush()
                os.utime(handle.fileno(), ns=times)
        os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _folders(root: Path, rel: str) -> bool:
    """The folders `rel` under `root`, made or opened as `_write_at` does."""
    try:
        os.close(_open_folders(root, rel.split("/")))
    except OSError:
        return False
    return True


def _open_folders(root: Path, parts: list[str]) -> int:
    """The folder `parts` under `root`, open (the caller closes it), each on the way entered by
    `_enter`: made where missing, never followed through a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            fd = _enter(fd, part)
    except OSError:
        os.close(fd)  # `_enter` closes its folder only once it has opened the next
        raise
    return fd


def _enter(fd: int, part: str) -> int:
    """The folder `part` in the folder `fd` (closed), made anew when something else is there."""
    try:
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        os.mkdir(part, 0o755, dir_fd=fd)
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError:
        os.unlink(part, dir_fd=fd)  # a link or a file: removed, never followed
        os.mkdir(part, 0o755, dir_fd=fd)
        nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
    os.close(fd)
    return nxt


def ref_value(common: Path, name: str) -> str | None:
    """The value of the branch `name` in your repository: its loose file, else packed-refs."""
    loose = _read_at(common, name)
    if _is_name(loose):
        return loose
    packed = _read_at(common, "packed-refs", 1 << 26) or ""
    for line in packed.splitlines():
        sha, _, ref = line.partition(" ")
        if ref == name and _is_name(sha):
            return sha
    return None


@dataclass(frozen=True)
class _Side:
    """flowd's side of the lane: its admin dir's HEAD and what it names. (Not its index: flowd's
    own `git status` rewrites it; the lane's index, its staged changes, stays until HEAD moves.)"""

    head: str
    ref: str | None
    sha: str | None


def _side(common: Path, admin: Path) -> _Side | None:
    head = _read_at(admin, "HEAD")
    if head is None:
        return None
    ref = head.removeprefix("ref: ").strip() if head.startswith("ref: ") else None
    if ref is not None and (not ref.startswith("refs/heads/") or ".." in ref.split("/")):
        return None  # not a branch flowd gives a lane (detection puts it back)
    sha = ref_value(common, ref) if ref is not None else (head if _is_name(head) else None)
    return _Side(head, ref, sha)


def _record(admin: Path) -> dict[str, object]:
    text = _read_at(admin, RECORD, 65536)
    try:
        said = json.loads(text or "{}")
    except ValueError:
        return {}
    return said if isinstance(said, dict) else {}


def _same(side: _Side, record: dict[str, object]) -> bool:
    return (record.get("head"), record.get("sha")) == (side.head, side.sha)


def _format(common: Path) -> tuple[str, str]:
    """The repository's format version and its `extensions.*` lines, read once from its own
    config file (which git reads without includes)."""
    key = str(common)
    if key not in _FORMAT:
        proc = run_git(
            common,
            [
                "config",
                "-f",
                str(common / "config"),
                "--get-regexp",
                r"^(core\.repositoryformatversion|extensions\.)",
            ],
            "",
            ok_codes=range(256),
        )
        lines = [line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line]
        extensions = "".join(
            f"\t{k.split('.', 1)[1]} = {v}\n" for k, v in lines if k.startswith("extensions.")
        )
        version = next((v for k, v in lines if k == "core.repositoryformatversion"), "0")
        _FORMAT[key] = (version, extensions)
    return _FORMAT[key]


_HOOKS_ABOVE: dict[str, bool] = {}


def _hooks_named_above(common: Path) -> bool:
    """Whether a config above your repository's own names a hooks folder (`core.hooksPath` in your
    system or global config, a conditional include of it matching this repository, or your
    environment's `GIT_CONFIG_COUNT`): the lane's git reads those itself, and a value in the lane
    repository's own config would override them. Asked of git once per repository, with your
    environment (not flowd's own git's, which names no hooks folder)."""
    key = str(common)
    if key not in _HOOKS_ABOVE:
        args = [
            "git",
            "--git-dir",
            key,
            "config",
            "--includes",
            "--show-scope",
            "--get-all",
            "core.hooksPath",
        ]
        leave = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE")
        proc = subprocess.run(
            args,
            env={k: v for k, v in os.environ.items() if k not in leave},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        scopes = {line.split("\t", 1)[0] for line in proc.stdout.splitlines()}
        _HOOKS_ABOVE[key] = bool(scopes & {"system", "global", "command"})
    return _HOOKS_ABOVE[key]


def _config(common: Path, admin: Path) -> bytes:
    """The lane repository's config: the repository's format and the repository's config, and
    the worktree's sparse settings, included by path (what the lane's git read before, through
    `commondir`)."""
    version, extensions = _format(common)
    text = f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n\tlogallrefupdates = true\n"
    if not _hooks_named_above(common):
        # git's default hooks folder is the common dir's; the lane repository is a git dir of its
        # own, and without this your `.git/hooks` never ran for an agent's own commit. Before the
        # include: a `core.hooksPath` of your repository's config (husky's) still wins.
        text += f"\thooksPath = {config_value(str(common / 'hooks'))}\n"
    if extensions:
        text += f"[extensions]\n{extensions}"
    text += f"[include]\n\tpath = {config_value(str(common / 'config'))}\n"
    if os.path.lexists(admin / "config.worktree"):
        text += f"\tpath = {config_value(str(admin / 'config.worktree'))}\n"
    # After the includes, so above your settings and your global ones: no signing key or agent
    # is reachable from a lane (docs/sandbox.md "Socket files"), so a signed commit could only
    # fail; the lane's commits are unsigned, as flowd's own are (docs/repositories.md "Your hooks").
    text += "[commit]\n\tgpgSign = false\n[tag]\n\tgpgSign = false\n\tforceSignAnnotated = false\n"
    return text.encode("utf-8")


def make(common: Path, admin: Path, wt: Path) -> None:
    """Give the worktree `wt` (admin dir `admin`) its lane repository, point its `.git` file at
    it, and bring it up to flowd's side (`sync`). Idempotent; a link or file a lane put in the lane
    repository's place is removed, never followed."""
    home = lane_git(admin)
    with _lock(admin):
        try:
            mode = os.lstat(home).st_mode
            if not stat.S_ISDIR(mode):
                os.unlink(home)
                raise FileNotFoundError(home)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(home, 0o755)
    point(admin, wt)
    sync(common, admin, wt)


def point(admin: Path, wt: Path) -> None:
    """The worktree's `.git` file naming its lane repository (or its admin dir when it has none)."""
    want = dotgit_text(admin)
    if _read_at(wt, ".git") != want.strip():
        put_back(wt / ".git", want.encode("utf-8"))


def unpoint(admin: Path, wt: Path) -> None:
    """The worktree's `.git` file naming its admin dir again, as git's own `worktree remove`,
    `move` and `repair` want it (each checks the file names the admin dir back)."""
    if active(admin) and _read_at(wt, ".git") != f"gitdir: {admin}":
        put_back(wt / ".git", f"gitdir: {admin}\n".encode())


def drop(admin: Path, wt: Path) -> None:
    """No lane repository for the worktree any more (a lane confined before runs unconfined now,
    `detect` or `off`: its processes would write objects where no take-in looks): its `.git`
    file names its admin dir again, the lane repository and flowd's record of it are removed.
    Take its move in first (`take_branch`)."""
    if not active(admin):
        return
    with _lock(admin):
        unpoint(admin, wt)
        shutil.rmtree(lane_git(admin), ignore_errors=True)  # follows no link (fd-based on Linux)
        with contextlib.suppress(OSError):
            os.unlink(admin / RECORD)
        _VIEWS.pop(str(admin), None)


@contextlib.contextmanager
def _held(common: Path, admin: Path) -> Iterator[_Side | None]:
    """The worktree's lock held, with flowd's side of it; None (nothing to write) when the worktree
    has no lane repository or its admin dir tells no side."""
    if not active(admin):
        yield None
        return
    with _lock(admin):
        yield _side(common, admin)


def sync(common: Path, admin: Path, wt: Path, *, force: bool = False, exact: bool = False) -> None:
    """Write the lane repository from flowd's side when that changed since flowd last wrote it
    (`exact`, a step's start after its take-in: or when the lane's branch is not where flowd left
    it, a move never taken in; `force`: always, a refused step's, a thrown-away candidate's): its
    `HEAD` says what the admin dir's says, the branch it names holds the branch's value in your
    repository, its index is the admin dir's (stat data and sparse bits kept), and its config and
    sparse patterns follow the worktree's. A move of the lane's not yet taken in (`adopt`) is
    overwritten: take in first. When flowd's side names another branch than it did (a spare handed
    to the next story) the lane repository is made anew: it keeps nothing the last lane wrote."""
    with _held(common, admin) as side:
        if side is None:
            return
        record = _record(admin)
        home = lane_git(admin)
        lane_head = _read_at(home, "HEAD")
        if not force and _same(side, record) and lane_head is not None:
            tip = _read_at(home, side.ref) if side.ref is not None else lane_head
            if not exact:
                return
            if tip == record.get("lane"):
                _write_at(home, "packed-refs", _view(common, admin, side.ref))  # the others moved on
                return
        if record.get("head") != side.head:
            shutil.rmtree(home, ignore_errors=True)  # follows no link (fd-based on Linux)
            with contextlib.suppress(FileExistsError):
                os.mkdir(home, 0o755)
        ok = _fill(common, admin, home, side, side.sha)
        point(admin, wt)
        if ok:
            _write_record(admin, side, side.sha)


def _alternates(common: Path, admin: Path) -> bytes:
    """Where the lane repository's objects are, for a git run in the worktree without the lane's
    environment (yours, an editor's): your repository's store and the lane's quarantine. The lane's
    own processes are given both by their environment, which makes git read no `objects/` here."""
    stores = [store for store in (common / "objects", admin / QUARANTINE_DIR) if store.is_dir()]
    return "".join(f"{line}\n" for line in alternates(stores, "\n").splitlines()).encode()


def renew(common: Path, admin: Path, wt: Path) -> None:
    """Make the lane repository anew from flowd's side (a lane step ended, its move taken in):
    every entry the lane wrote in it is removed (hooks, `config`, `commondir`, `config.worktree`,
    `info/`, `objects/info/alternates`, links, stray files), never followed, and flowd's written
    again as `sync` writes them, in the same folder (a confined process's rule still holds it).
    Other git processes (your shell prompt's, your editor's) read that git dir unconfined: nothing
    the lane planted there outlives its step (docs/sandbox.md "The lane repository"). Only the
    branch's value stays the lane's when it is a commit's name, and the record is left alone, so a
    move a stray made after the take-in is still seen by the next one (`moved`)."""
    with _held(common, admin) as side:
        if side is None:
            return
        home = lane_git(admin)
        kept = _read_at(home, side.ref) if side.ref is not None else None
        _empty(home, admin)
        _fill(common, admin, home, side, kept if _is_name(kept) else side.sha, again=True)
        point(admin, wt)


def _empty(home: Path, admin: Path) -> None:
    """Every entry of the folder `home` removed, the folder itself kept (its inode: a confined
    process's Landlock rule names it). A link is removed, never followed; a folder the lane made
    unwritable is made writable again (never through a link) and moved out into `admin` first."""
    try:
        os.chmod(home, 0o755)  # the lane may have taken its write bit away (`active`: not a link)
        fd = os.open(home, _DIR_FLAGS)
    except OSError:
        return
    try:
        for name in os.listdir(fd):
            try:
                os.unlink(name, dir_fd=fd)
                continue
            except IsADirectoryError:
                pass
            except OSError:
                continue
            _remove_folder(fd, name, admin)
    finally:
        os.close(fd)


def _remove_folder(parent: int, name: str, admin: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(name, dir_fd=parent)  # fd-based: follows no link
    if not _writable(parent, name):
        return  # gone (or not a folder)
    aside = admin / f".{LANE_GIT}.gone.{os.getpid()}.{threading.get_ident()}"
    shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(name, aside, src_dir_fd=parent)  # out of the lane's reach
    except OSError:
        return
    for top, dirs, _files in os.walk(aside):  # follows no link to a folder
        for sub in dirs:
            path = os.path.join(top, sub)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(aside, ignore_errors=True)


def _writable(parent: int, name: str) -> bool:
    """The folder `name` in `parent` made writable by its owner; False when it is not a folder
    (a link is never followed: the mode is set through a handle of the folder itself)."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return False
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _fill(
    common: Path, admin: Path, home: Path, side: _Side, value: str | None, *, again: bool = False
) -> bool:
    """flowd's entries of the lane repository written from flowd's side (`value` the branch's):
    its config, `objects/` (its `info/alternates`: your store, the quarantine), `refs/heads/`,
    `logs/`, the branch, `HEAD`, the index, the refs copy (`again`: the one flowd wrote last, as of
    the step's start), the sparse patterns, a split index's shared part, and what git reads from
    your git dir itself (`_FROM_COMMON`). False when one could not be written."""
    ok = _write_at(home, "config", _config(common, admin))
    ok = _folders(home, "objects") and _folders(home, "refs/heads") and ok  # what git looks for
    ok = _write_at(home, "objects/info/alternates", _alternates(common, admin)) and ok
    ok = _folders(home, "logs") and ok  # as in the admin dir (a lane's script may expect it)
    if side.ref is not None and value is not None:
        ok = _write_at(home, side.ref, f"{value}\n".encode()) and ok
    ok = _write_at(home, "HEAD", f"{side.head}\n".encode()) and ok
    ok = _copy(admin, home, "index") and ok
    own, view = _VIEWS.get(str(admin), (None, b""))
    fresh = view if again and view and own == side.ref else _view(common, admin, side.ref)
    ok = _write_at(home, "packed-refs", fresh) and ok
    sparse = _read_at(admin, "info/sparse-checkout", 1 << 26)
    if sparse is not None:
        ok = _write_at(home, "info/sparse-checkout", (sparse + "\n").encode()) and ok
    for name in _shared_indexes(admin):
        ok = _copy(admin, home, name) and ok
    for name in _FROM_COMMON:
        ok = _copy(common, home, name) and ok
    return ok


# Files of your repository's git dir that git reads from the git dir it works in, not through
# the common dir's config: without its `shallow` the lane's `git log` of a shallow clone failed on
# the missing parents; without `info/exclude` and `info/attributes` its `git add -A` committed
# what you exclude there (a `.env`) and its checkouts ignored your attributes.
_FROM_COMMON = ("shallow", "info/exclude", "info/attributes")


def _view(common: Path, admin: Path, own: str | None) -> bytes:
    """`_refs_view`, remembered as the one last written in the worktree's lane repository."""
    view = _refs_view(common, own)
    _VIEWS[str(admin)] = (own, view)
    return view


def _refs_view(common: Path, own: str | None) -> bytes:
    """Your repository's refs as a `packed-refs` of the lane repository (its own branch aside):
    the lane's git still sees `main`, `epic/*`, tags (`git diff main`), as of the last `sync`;
    what it does to them changes only its own copy. Read as data: packed-refs, then loose files,
    each read again only when it changed (flowd/vcs/packed_refs.py, flowd/vcs/loose_refs.py)."""
    loose = {name: text for name, text in loose_refs.read(common, exact=False).items() if _is_name(text)}
    return packed_refs.view(packed_refs.read(common), loose, own)


def _copy(source: Path, home: Path, name: str) -> bool:
    """The file `name` of the git dir `source` (the admin dir, or your repository's) as the lane
    repository's, with its times, or none there when `source` has none (removed without following
    a link the lane put on the way)."""
    try:
        handle = open_regular(source / name)
    except FileNotFoundError:
        return unlink_inside(home, name)
    except OSError:
        return False
    if handle is None:
        return False
    with handle:
        st = os.fstat(handle.fileno())
        # With its times: an index's own time is what git's racily-clean rule reads (a later one
        # hid a same-size edit made in the second the index was written: flowd/vcs/changes.py).
        return _write_at(home, name, handle.read(), (st.st_atime_ns, st.st_mtime_ns))


def _shared_indexes(admin: Path) -> list[str]:
    """A split index's shared part (`sharedindex.<hash>`), which the index names in its folder."""
    with contextlib.suppress(OSError):
        return [n for n in os.listdir(admin) if n.startswith("sharedindex.")]
    return []


def _write_record(admin: Path, side: _Side, lane: str | None) -> None:
    """The record, written over in place when it is a file of its own (the admin dir is flowd's:
    no lane makes a link there; a new file costs more than the take-in's own work), else anew. A
    record a crash left cut short, or part old and part new, reads as disagreeing (the next
    `sync` writes the lane repository from your branch, which already holds what was taken) or
    as a move of the branch to where it already is."""
    data = json.dumps({"head": side.head, "sha": side.sha, "lane": lane}).encode("utf-8")
    try:
        fd = os.open(admin / RECORD, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        put_back(admin / RECORD, data)
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            # Written over, cut only when it was longer: a record is mostly as long as the last
            # (the same names), and emptying a file first costs more than writing it.
            os.pwrite(fd, data, 0)
            if st.st_size > len(data):
                os.ftruncate(fd, len(data))
            return
    finally:
        os.close(fd)
    put_back(admin / RECORD, data)


def moved(common: Path, admin: Path) -> Move | None:
    """The lane's move of its branch since flowd last wrote the lane repository, read as data:
    the branch flowd's side names (or, detached, the lane repository's own `HEAD` when it is a
    commit). None: no lane repository, no move, or flowd's side moved since (the lane's move is
    then stale, and the next `sync` overwrites it)."""
    if not active(admin):
        return None
    side = _side(common, admin)
    record = _record(admin)
    if side is None or not _same(side, record):
        return None
    now = _read_at(lane_git(admin), side.ref if side.ref is not None else "HEAD")
    if not _is_name(now) or now == record.get("lane"):
        return None
    if side.ref is None or not side.ref.startswith(STORY_REFS):
        return None  # a detached HEAD's commits (a candidate's gates) or the epic's: never taken
    return Move(side.ref, side.sha, str(now))


def adopt(common: Path, admin: Path, wt: Path, move: Move, held: Mapping[str, bytes] | None = None) -> bool:
    """Take the lane's `move` in (its objects are in the repository's store, checked): your story
    branch follows the lane's own, its old value checked under the worktree's lock and the ref's
    (no lane can write your refs; flowd's own commits to the branch come between the lane's steps,
    when no take-in runs), and the worktree's index is read from the new commit, keeping the
    stat of what did not change (what `git reset --no-refresh` does, with no git process where
    `held`, the commits and trees the take-in read, has what changed: flowd/vcs/index_reset.py,
    flowd/vcs/ref_move.py); the record says the lane repository agrees.
    False when flowd's side moved meanwhile (nothing taken)."""
    pinned = ["--git-dir", str(admin), "--work-tree", str(wt)]
    env = {"GIT_COMMON_DIR": str(common), "GIT_REFLOG_ACTION": REFLOG_ACTION}
    with _lock(admin):
        side = _side(common, admin)
        if side is None or side.ref is None or not _same(side, _record(admin)) or side.sha != move.old:
            return False
        try:
            if move.old is None or not ref_move.files_backend(_format(common)[1]):
                run_git(common, [*pinned, "reset", "-q", "--no-refresh", move.new], "", env=env)
            else:
                ref = side.ref
                with ref_move.locked(common, ref, move.old, lambda: ref_value(common, ref)) as move_ref:
                    if move_ref is None:
                        return False
                    put_back = _index_to(
                        common, admin, move, held or {}, [*pinned, "read-tree", "--reset"], env
                    )
                    try:
                        move_ref(move.new, REFLOG_ACTION, [admin / "logs" / "HEAD"])
                    except OSError:
                        put_back()  # the branch did not move: the index goes back to where it stays
                        return False
        except (FlowdError, OSError):
            return False
        # The branch is at the lane's commit now (moved under its lock and the worktree's).
        _write_record(admin, _Side(side.head, side.ref, move.new), move.new)
    return True


def _index_to(
    common: Path,
    admin: Path,
    move: Move,
    held: Mapping[str, bytes],
    read_tree: list[str],
    env: dict[str, str],
) -> Callable[[], None]:
    """The worktree's index read from `move.new`, in-process where `held` allows
    (flowd/vcs/index_reset.py), else by `git read-tree --reset`; what puts it back as it was."""
    index = admin / "index"
    with contextlib.suppress(OSError), index_reset.Lock(index) as lock:
        old = index_reset.read(index)
        new = index_reset.reset(old, move.new, held) if old is not None else None
        if old is not None and new is not None:
            lock.install(new)
            was = old

            def back() -> None:
                with index_reset.Lock(index) as again:
                    again.install(was.data, was.mtime_ns)

            return back
    run_git(common, [*read_tree, move.new], "", env=env)

    def reread() -> None:
        run_git(common, [*read_tree, str(move.old)], "", env=env)

    return reread


def before_worktree_command(wt: Path) -> Path | None:
    """Before git's own `worktree remove`, `move` or `repair` of `wt`: its `.git` file names its
    admin dir again (`unpoint`); the admin dir when it has a lane repository (`after_worktree_command`
    points the moved worktree back at it), else None."""
    admin = private_git_dir(wt)
    if admin is None or not active(admin):
        return None
    unpoint(admin, wt)
    return admin


def after_worktree_command(admin: Path | None, wt: Path) -> None:
    """After git's `worktree move` or `repair`: the worktree's `.git` names its lane repository again."""
    if admin is not None and active(admin) and os.path.isdir(wt):
        point(admin, wt)


def take_branch(common: Path, admin: Path, wt: Path) -> bool:
    """`moved` and `adopt` in one (its objects taken in first): whether the branch followed."""
    move = moved(common, admin)
    return move is not None and adopt(common, admin, wt, move)
