"""The confinement of one run: which lane a process belongs to, its rules, and how it starts.

Every lane process (agents, setup commands, gates, parallel-task worktrees, `_epic` gates) is
started through `Confinement.spawn`, which builds a Landlock ruleset for the process's working
directory in flowd and hands the child a two-call `preexec_fn` that binds it before `exec`;
everything the child starts inherits it. The run's confinement lives in a context variable the
runner (or a Ray node's lane) sets, so the spawn sites need no new parameter.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base.layout import TRAIN_DIR, story_of_worktree
from flowd.programs.state_dirs import lane_caches, state_paths
from flowd.sandbox import landlock, sockets
from flowd.sandbox.bind import binder
from flowd.sandbox.policy import LanePlaces, Protected, read_rules, secret_paths, what_is, write_rules
from flowd.vcs import lane_repo, quarantine
from flowd.vcs.gitcli import GitDirChanged, admin_of

# A lane's own places inside its admin dir (besides its lane repository).
OWN_IN_ADMIN = ("flowd-tmp", "flowd-cache", quarantine.QUARANTINE_DIR, "modules")
Report = Callable[[str, str, str, str], None]  # (lane, path, what, by whom): a refusal the OS made


def mechanism() -> tuple[str, int]:
    """What this machine offers: ("landlock ABI 7", 7) or ("none available", 0)."""
    version = landlock.abi()
    return (f"landlock ABI {version}", version) if version > 0 else ("none available", 0)


# ABI 1 refuses every rename and link across directories, git's way of storing an object.
MINIMUM_ABI = 2


def effective_mode(setting: str, version: int) -> str:
    """`off` only when chosen; `enforce` only where the OS can; everything else `detect`."""
    if setting == "off":
        return "off"
    return "enforce" if setting == "enforce" and version >= MINIMUM_ABI else "detect"


def unsealed(version: int, masking: bool) -> list[str]:
    """What a lane can still reach under `enforce` on this kernel (docs/sandbox.md "Modes and
    platforms"): signals and abstract sockets before Landlock ABI 6; socket files always (no ABI
    here covers them), only those flowd does not find where the binder can hide them."""
    gaps = ["signals", "abstract sockets"] if version < landlock.SCOPE_ABI else []
    return [*gaps, "socket files outside the hidden places" if masking else "socket files"]


def status_line(setting: str) -> str:
    """The last line of `flowd roster check` (docs/sandbox.md): `sandbox: <mechanism> (<mode>)`,
    then under `enforce` `; not sealed: <what>`."""
    name, version = mechanism()
    mode = effective_mode(setting, version)
    line = f"sandbox: {name} ({mode})"
    if mode == "enforce":
        line += "; not sealed: " + ", ".join(unsealed(version, sockets.available()))
    return line


@dataclass
class SpawnOptions:
    """How to start a confined process: `argv(...)` its command line, `env` added to its
    environment, and `pass_fds`/`preexec_fn` given to the spawn call as they are."""

    preexec_fn: Callable[[], None] | None = None  # binds in the child where there is no binder
    env: dict[str, str] = field(default_factory=dict)  # TMPDIR and friends, added to the child's
    key: str | None = None  # the lane worktree the process is confined to (None: no lane)
    prefix: tuple[str, ...] = ()  # the binder and the ruleset fd (flowd/sandbox/bind.py)
    pass_fds: tuple[int, ...] = ()

    def argv(self, argv: list[str]) -> list[str]:
        if not self.prefix:
            return argv
        program = shutil.which(argv[0]) or argv[0]  # the binder `execve`s: no PATH search
        return [*self.prefix, program, *argv]


@dataclass(frozen=True)
class Lane:
    name: str  # the story id (a parallel task's story), or `_epic`
    places: LanePlaces
    env: dict[str, str] = field(default_factory=dict)  # what pins the program's state dirs


_CURRENT: ContextVar[Confinement | None] = ContextVar("flowd_confinement", default=None)


def current() -> Confinement | None:
    return _CURRENT.get()


@contextlib.contextmanager
def active(confinement: Confinement | None) -> Iterator[None]:
    token = _CURRENT.set(confinement)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class Confinement:
    def __init__(
        self,
        setting: str,
        *,
        checkout: Path,
        common_dir: Path,
        lanes_root: Path,
        epic: str,
        allow_write: list[str] = [],  # noqa: B006 - never mutated
        allow_read: list[str] = [],  # noqa: B006
        report: Report | None = None,
        home: Path | None = None,
        version: int | None = None,
    ) -> None:
        self.version = landlock.abi() if version is None else version
        self.mode = effective_mode(setting, self.version)
        self.home = Path(os.path.realpath(home or Path.home()))
        self.checkout = Path(os.path.realpath(checkout))
        self.common_dir = Path(os.path.realpath(common_dir))
        self.lanes_root = Path(os.path.realpath(lanes_root))
        self.epic = epic
        self.allow_write = tuple(self._resolve(entry) for entry in allow_write)
        self.allow_read = [self._resolve(entry) for entry in allow_read]
        self.report = report
        self.protected = Protected(
            checkout=self.checkout,
            common_dir=self.common_dir,
            flow_dir=self.checkout / ".flow",
            lanes_root=self.lanes_root,
            home=self.home,
            secrets=tuple(secret_paths(self.home, self.allow_read)),
        )
        self._reads: list[landlock.Rule] | None = None
        self._spare_temp: Path | None = None
        self._told: set[tuple[str, str, str]] = set()
        self._caches: dict[str, str] = {}  # lane key -> its cache dir's name, for this run

    def _resolve(self, entry: str) -> Path:
        path = Path(entry).expanduser()
        return Path(os.path.realpath(path if path.is_absolute() else self.checkout / path))

    @property
    def enforcing(self) -> bool:
        return self.mode == "enforce"

    def seals(self, path: Path) -> bool:
        """Whether no lane process can write anything under `path` but the lanes' own worktrees:
        enforcing, and no `[sandbox] allowWrite` entry lies in, at or above it."""
        real = Path(os.path.realpath(path))
        return self.enforcing and not any(
            entry == real or real in entry.parents or entry in real.parents for entry in self.allow_write
        )

    # -- lanes --------------------------------------------------------------------------------
    def lane_top(self, cwd: Path) -> Path | None:
        """The lane worktree `cwd` lies in (`<lanes root>/<epic>/<name>`), or None."""
        real = Path(os.path.realpath(cwd))
        root = self.lanes_root / self.epic
        try:
            parts = real.relative_to(root).parts
        except ValueError:
            return None
        # A story's or the epic's worktree is `<epic>/<name>`; a merge-train candidate's is
        # `<epic>/_train/w<n>/_epic` (docs/merging.md), gated like the epic worktree.
        depth = 3 if parts and parts[0] == TRAIN_DIR else 1
        if len(parts) < depth or not (root.joinpath(*parts[:depth]) / ".git").is_file():
            return None
        return root.joinpath(*parts[:depth])

    def lane(self, cwd: Path, program: str | None = None, env: dict[str, str] | None = None) -> Lane:
        top = self.lane_top(cwd)
        admin = self._admin_dir(top) if top is not None else None
        name = story_of_worktree(top.name) if top is not None else ""
        temp = admin / "flowd-tmp" if admin is not None else self._spare()
        self._own_dir(temp, name)
        cache = self._cache(
            admin / "flowd-cache" if admin is not None else self._spare() / "flowd-cache", top, name
        )
        state: list[Path] = []
        owned, pins = state_paths(program, env or {}, self.home)
        for path, create in owned:
            if create:
                with contextlib.suppress(OSError):
                    path.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, as the programs make them
            state.append(path)
        git_dirs: tuple[Path, ...] = ()
        if admin is not None and top is not None:
            # Objects go to the lane's own store, the shared one read-only (flowd/vcs/quarantine.py);
            # its git works in a git dir of its own, its refs and index (flowd/vcs/lane_repo.py).
            self._own_dir(quarantine.quarantine(admin), name, 0o755)
            quarantine.prepare(admin)
            lane_repo.make(self.common_dir, admin, top)
            pins = {**pins, **quarantine.lane_env(admin, self.common_dir)}
            git_dirs = (quarantine.quarantine(admin), lane_repo.lane_git(admin))
            if os.path.isdir(admin / "modules"):
                git_dirs += (admin / "modules",)  # its submodules' git dirs
        places = LanePlaces(
            worktree=top,
            git_dirs=git_dirs,
            temp=temp,
            state=tuple(state),
            extra=self.allow_write,
            cache=cache,
        )
        return Lane(name, places, {**lane_caches(cache), **pins})

    def _own_dir(self, path: Path, lane: str, mode: int = 0o700) -> None:
        """Make `path`, a folder of the lane's own in a place its processes can write (its temp,
        cache and object folders), a real directory flowd made: a link or anything but a
        directory a lane put there is removed (never followed) and the folder made anew, and
        reported (docs/sandbox.md "Links a lane planted"). The rules grant it only by its real
        path (`write_rules`), so a link planted after this check is not granted either."""
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                return
            os.unlink(path)  # a link (of any kind) or a file: removed, not followed
        except FileNotFoundError:
            pass
        except OSError:
            shutil.rmtree(path, ignore_errors=True)  # a directory it raced in: not a link
        else:
            self._tell(
                lane, str(path), "gitDir", "a link or file its processes put in place of its own folder"
            )
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=mode, parents=True)

    def _tell(self, lane: str, path: str, what: str, origin: str) -> None:
        if self.report is not None and (lane, path, origin) not in self._told:
            self._told.add((lane, path, origin))
            self.report(lane, path, what, origin)

    def _cache(self, root: Path, top: Path | None, lane: str) -> Path:
        """The lane's own package caches (docs/sandbox.md "Caches"): a directory under `root`
        named by a random word drawn once per run and lane (`key_for`), so a worktree handed on
        as a spare (docs/repositories.md "Worktree reuse") keeps nothing the previous lane could
        have planted for the next one to find; what an earlier lane left there is removed."""
        self._own_dir(root, lane)
        key = self.key_for(top) if top is not None else None
        name = self._caches.get(key or "")
        if name is None:
            name = self._caches[key or ""] = secrets.token_hex(8)
            with contextlib.suppress(OSError):
                for stale in os.scandir(root):
                    if stale.is_dir(follow_symlinks=False):
                        shutil.rmtree(stale.path, ignore_errors=True)
                    else:
                        os.unlink(stale.path)  # a link is removed, never followed
        cache = root / name
        self._own_dir(cache, lane)
        return cache

    def _admin_dir(self, top: Path) -> Path | None:
        """The worktree's private git dir, found from the repository's side (the admin dir whose
        `gitdir` names it: flowd/vcs/gitcli.py): the `.git` file is the lane's to write, and a
        pointer at another lane's admin dir must not widen what it may write."""
        try:
            return admin_of(self.common_dir, top)
        except GitDirChanged:
            return None

    def _spare(self) -> Path:
        # The private temp folder of a process started where no lane is (a story worktree the
        # user deleted, say): made once, removed by `close` when the run is over.
        if self._spare_temp is None:
            self._spare_temp = Path(tempfile.mkdtemp(prefix="flowd-lane-"))
        return self._spare_temp

    def close(self) -> None:
        """The run is over: remove the temp folder `_spare` made, and what its processes left."""
        if self._spare_temp is not None:
            shutil.rmtree(self._spare_temp, ignore_errors=True)
            self._spare_temp = None

    # -- starting processes -------------------------------------------------------------------
    def rules(self, lane: Lane) -> list[landlock.Rule]:
        if self._reads is None:
            self._reads = read_rules(self.home, self.allow_read)
        return [*self._reads, *write_rules(lane.places)]

    def key_for(self, cwd: Path) -> str | None:
        """Which lane a process started in `cwd` is confined to: its worktree's path AND its
        directory's identity, which the rules are bound to. A worktree reused under another
        name (docs/repositories.md "Worktree reuse") or another directory made at the same
        path (a Ray lane placed again) is another key: a process confined to the one never
        serves the other."""
        top = self.lane_top(cwd) if self.enforcing else None
        if top is None:
            return None
        try:
            st = os.stat(top)
        except OSError:
            return str(top)
        return f"{top}@{st.st_dev}:{st.st_ino}"

    @contextlib.contextmanager
    def spawn(
        self, cwd: Path, program: str | None = None, env: dict[str, str] | None = None
    ) -> Iterator[SpawnOptions]:
        """The options that confine a process started in `cwd`; the ruleset is closed on exit
        (the child holds its own copy from the moment it forked)."""
        if not self.enforcing:
            yield SpawnOptions()
            return
        lane = self.lane(cwd, program, env)
        temp = str(lane.places.temp)
        ruleset = landlock.build(self.rules(lane), self.version)
        hidden = sockets.blanked({**os.environ, **(env or {})})  # docs/sandbox.md "Socket files"
        env = {**lane.env, **hidden, "TMPDIR": temp, "TMP": temp, "TEMP": temp}
        helper = binder()
        try:
            if helper is not None:
                prefix = (helper, str(ruleset.fd), *self._masks(lane, cwd))
                yield SpawnOptions(env=env, key=self.key_for(cwd), prefix=prefix, pass_fds=(ruleset.fd,))
            else:
                yield SpawnOptions(preexec_fn=ruleset.binder(), env=env, key=self.key_for(cwd))
        finally:
            ruleset.close()

    def _masks(self, lane: Lane, cwd: Path) -> tuple[str, ...]:
        """The binder's namespace arguments: `n uid_map gid_map mask…` (flowd/sandbox/bind.py),
        `0 - -` where this machine cannot make the namespaces."""
        if not sockets.available():
            return ("0", "-", "-")
        p = lane.places
        keep = [path for path in (p.worktree, *p.git_dirs, p.temp, cwd) if path is not None]
        keep += [*p.state, *p.extra, self.checkout, self.common_dir, self.lanes_root]
        found = sockets.masks(self.home, keep)
        return (str(len(found)), *sockets.id_maps(), *found)

    # -- refusals -----------------------------------------------------------------------------
    def denials(self, text: str, cwd: Path, before: Sequence[str] = ()) -> list[tuple[str, str]]:
        """(path, what) for every protected path a refusal in `text` names (docs/sandbox.md
        "Refusals"): the messages of sh, coreutils, git, Python and Node all name the path on
        the line that says `Permission denied` / `EACCES` / `Operation not permitted`. `before`:
        the lines the same output printed just before `text` (a Python traceback's source line
        may come in an earlier read than its exception's), context only."""
        lane = self.lane_top(cwd)
        admin = self._admin_dir(lane) if lane else None
        # Its own places in its admin dir; the admin dir itself is flowd's (a refusal there is `gitDir`).
        mine = [*(admin / n for n in OWN_IN_ADMIN), lane_repo.lane_git(admin)] if admin is not None else []
        own = tuple(p for p in (lane, *mine) if p is not None)
        found: list[tuple[str, str]] = []
        lines = [*before, *text.splitlines()]
        for number, line in enumerate(lines):
            if number < len(before) or not _DENIED.search(line):
                continue
            scoped = _scoped_refusal(line) or _python_scoped(lines[max(0, number - 3) : number], line)
            if scoped is not None:
                if scoped not in found:
                    found.append(scoped)
                continue
            for match in _PATH.finditer(line):
                if match.start() == len(line) - len(line.lstrip()) and line[match.end() :].startswith(":"):
                    continue  # the program naming itself: `/bin/sh: 1: cannot create …`
                full = _where(match.group(1) or match.group(2), cwd)
                what = what_is(full, own, self.protected)
                if what is not None and (full, what) not in found:
                    found.append((full, what))
        return found

    def scan(self, text: str, cwd: Path, origin: str, before: Sequence[str] = ()) -> None:
        """Report each new refusal `text` shows, once per lane, path and `origin` (who tried);
        `before` as `denials` takes it."""
        if not self.enforcing or self.report is None or not _DENIED.search(text):
            return
        top = self.lane_top(cwd)
        lane = story_of_worktree(top.name) if top is not None else ""
        for path, what in self.denials(text, cwd, before):
            self._tell(lane, path, what, origin)


# EXDEV is how Landlock refuses a link or rename across the lane's boundary.
_DENIED = re.compile(
    r"permission denied|EACCES|EPERM|operation not permitted|cross-device link", re.IGNORECASE
)
_MARKS = (b"denied", b"EACCES", b"EPERM", b"not permitted", b"cross-device")
# What a refused `kill` or `connect` prints (Landlock's scopes answer EPERM): sh's and bash's
# `kill: (123) - Operation not permitted`, Python's `os.kill`, socat's and Node's `connect`.
_EPERM = re.compile(r"EPERM|operation not permitted", re.IGNORECASE)
_KILL = re.compile(r"\b(?:kill|killpg|signal)\b(?![.\w-])\W*(?:\((\d+)\)|(\d+))?", re.IGNORECASE)
_CONNECT = re.compile(r"\bconnect\b", re.IGNORECASE)
_ABSTRACT = re.compile(r"""(?:\\0|\\x00|@)([\w./-]+)""")
# How sh (dash) and bash start a message of a script or `-c` command: `<name>: <n>: `,
# `<name>: line <n>: ` (`/tmp/x.sh: 83: kill: Operation not permitted`).
_SHELL_PREFIX = re.compile(r"^\s*[^\s:][^:]*:\s(?:line\s)?\d+:\s")


def _scoped_refusal(line: str) -> tuple[str, str] | None:
    """("pid 123", "signal") or ("@name", "socket") for a refused signal or abstract-socket
    connect the line names (docs/sandbox.md "Refusals"); None for any other line."""
    if not _EPERM.search(line):
        return None
    if _CONNECT.search(line):
        name = _ABSTRACT.search(line)
        return (f"@{name.group(1)}" if name else "abstract socket", "socket")
    # The shell naming itself and the line first (`/path/x.sh: 83: kill: …`, `bash: line 1: …`)
    # is not a path the refusal names; a path after it is (`kill.txt` is a file).
    rest = _SHELL_PREFIX.sub("", line, count=1)
    kill = _KILL.search(rest) if _PATH.search(rest) is None else None
    if kill is not None:
        pid = kill.group(1) or kill.group(2)
        return (f"pid {pid}" if pid else "a process", "signal")
    return None


# Python's refused `os.kill`/`os.killpg`/`Popen.send_signal`/`socket.connect` (the scopes' EPERM,
# no file named): `PermissionError: [Errno 1] Operation not permitted`, under the traceback's last
# source line, which names the call (a script's or module's; `python3 -c` before 3.13 shows none).
_PY_EPERM = re.compile(r"^\s*(?:PermissionError|OSError): \[Errno 1\] Operation not permitted\s*$")
_PY_SIGNAL = re.compile(
    r"\b(?:kill|killpg|send_signal|terminate|pidfd_send_signal|pthread_kill)\s*\(\s*(\d+)?(?=[\s,)])?"
)
_PY_CONNECT = re.compile(r"\.(?:connect|connect_ex|sendto)\s*\(")


def _python_scoped(before: list[str], line: str) -> tuple[str, str] | None:
    """("pid 123" or "a process", "signal"), or ("@name" or "abstract socket", "socket"), for
    Python's report of a refused signal or abstract-socket connect: `line` its exception line,
    `before` the lines above it (the traceback's last source line names the call)."""
    if not _PY_EPERM.match(line):
        return None
    # The last line above that is not empty nor the markers 3.11 puts under the failing part.
    source = next((b.strip() for b in reversed(before) if b.strip().strip("^~")), "")
    if source.startswith(("File ", "Traceback ")):
        return None  # no source shown: the call is not known, so it is not named
    if _PY_CONNECT.search(source):
        name = _ABSTRACT.search(source)
        return (f"@{name.group(1)}" if name else "abstract socket", "socket")
    kill = _PY_SIGNAL.search(source)
    if kill is not None:
        return (f"pid {kill.group(1)}" if kill.group(1) else "a process", "signal")
    return None


_PROC = re.compile(r"^/proc/(?:self|\d+)/(root|cwd)(?=/|$)")


def _where(token: str, cwd: Path) -> str:
    """Where a path a refusal names would have landed: relative to the command's directory,
    through `/proc/<pid>/root` and `/proc/<pid>/cwd` (taken as the command's), lock files as
    the file they guard."""
    path = os.path.expanduser(token.removesuffix(".lock"))
    proc = _PROC.match(path)
    if proc is not None:
        path = (str(cwd) if proc.group(1) == "cwd" else "") + path[proc.end() :] or "/"
    return os.path.normpath(path if path.startswith("/") else os.path.join(cwd, path))


# A path as the tools print it: quoted (coreutils quotes ‘thus’ in a UTF-8 locale), or a bare
# word starting with `/`, `~/` or `./`/`../` (not the tail of a word: git's `refs/tags/v1` in
# "could not delete reference refs/tags/v1: Unable to create '…/packed-refs.lock'" is a ref's
# name, not a path `/tags/v1` outside the lane; the refusal is the quoted lock file's).
_PATH = re.compile(
    r"""['"`‘]((?:~|\.{1,2})?/[^'"`‘’]*|[^'"`‘’\s]*/[^'"`‘’]*)['"`’]|(?<![\w.~/-])((?:~|\.{1,2})?/[^\s:'",;)‘’]+)"""
)


@contextlib.contextmanager
def spawning(
    cwd: Path, program: str | None = None, env: dict[str, str] | None = None
) -> Iterator[SpawnOptions]:
    """`Confinement.spawn` of the run's confinement; no options outside a confined run."""
    confinement = current()
    if confinement is None:
        yield SpawnOptions()
        return
    with confinement.spawn(cwd, program, env) as options:
        yield options


_TEXT_CAP = 256 * 1024  # a refusal is a short line: what a huge output holds past this is not read


def strings_in(value: object) -> list[str]:
    """Every string a decoded JSON value holds (a tool's output inside an agent's event)."""
    found: list[str] = []
    stack, size = [value], 0
    while stack and size < _TEXT_CAP:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
            size += len(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


class Scanner:
    """Feeds a process's output, chunk by chunk, to `Confinement.scan`, line-aligned."""

    def __init__(self, confinement: Confinement | None, cwd: Path, origin: str) -> None:
        self.confinement = confinement if confinement is not None and confinement.enforcing else None
        self.cwd, self.origin = cwd, origin
        self._rest = b""
        self._before: list[str] = []

    def feed(self, chunk: bytes) -> None:
        if self.confinement is None:
            return
        data = self._rest + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._rest = data[-4096:]
            return
        self._rest = data[cut + 1 :][-4096:]
        lines = data[: cut + 1]
        if any(mark in lines for mark in _MARKS):
            self.confinement.scan(lines.decode("utf-8", "replace"), self.cwd, self.origin, self._before)
        # The last lines, context for the next read's (a traceback's source line, then its error).
        self._before = lines[-1024:].decode("utf-8", "replace").splitlines()[-3:]

    def feed_json(self, line: bytes) -> None:
        """One JSON line of an agent's event stream (a CLI agent's stdout): the refusals its
        tools' outputs hold are inside its strings, quotes and newlines escaped."""
        if self.confinement is None or not any(mark in line for mark in _MARKS):
            return
        try:
            value = json.loads(line)
        except ValueError:
            return
        self.confinement.scan("\n".join(strings_in(value)), self.cwd, self.origin)

    def close(self) -> None:
        if self._rest:
            self.feed(b"\n")
