"""The git command line as flowd runs it: an environment that points git at the repository named
and no other, never a prompt or a hook, parsable messages; every failure a `GitError` naming what
could not be done with git's own reason (docs/repositories.md).

Almost everything runs the git CLI directly: GitPython spawns the same processes with extra
overhead on the hot path and has no worktree support (`gitops.Repo.discover` is its one use).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flowd.base.errors import EXIT_FAILED, FlowdError, InputError
from flowd.base.fsio import read_regular
from flowd.base.layout import LANE_GIT

FLOW_DIR = ".flow/"

# Variables that would point git at another repository, index or object store than the one we
# name (a flowd started from a git hook, or from a lane's process, inherits them).
_LEAKY_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_NAMESPACE",
)

# Parsable messages ("nothing to commit", "Already up to date"), never a prompt, an editor or a
# pager (docs/sandbox.md "flowd's own git").
_FIXED_ENV = {
    "LC_ALL": "C",
    "LANGUAGE": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
}
# The user's own variables that would make flowd's git run a program of theirs on lane content.
_DROPPED_ENV = ("GIT_EXTERNAL_DIFF",)


class GitError(FlowdError):
    """A git operation failed; the run cannot go on with this story (or at all)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


# The user's hooks (a `core.hooksPath` in ~/.gitconfig, husky, pre-commit) never run on flowd's
# own git commands: `--no-verify` skips only some (pre-commit, commit-msg, pre-merge-commit), not
# post-checkout, post-commit, post-merge or reference-transaction (docs/repositories.md).
_NO_HOOKS = ("core.hooksPath", os.devnull)
# What else in a config file could start a command from flowd's own git, turned off whatever the
# config files say: git reads these `GIT_CONFIG_COUNT` settings after every file
# (docs/sandbox.md "flowd's own git"). `core.fsmonitor` runs on status, add and diff-index;
# signing and signature checks run `gpg.program`; `ext::` URLs run any command.
_SEALED = (
    ("core.fsmonitor", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("merge.verifySignatures", "false"),
    ("log.showSignature", "false"),
    ("protocol.ext.allow", "never"),
)
# git's parallel checkout, one worker per core, for flowd's own worktrees: a whole checkout of a
# big repository is file creation, faster from several processes (below 100 files git writes
# them alone anyway). An environment that sets `checkout.workers` already keeps its own.
_WORKERS = ("checkout.workers", "0")


@dataclass(frozen=True)
class Pin:
    """The repository one of flowd's git commands works on, named in full: the git dir (a linked
    worktree's admin dir `<common>/worktrees/<id>`), the common dir and the work tree."""

    git_dir: Path
    common_dir: Path
    work_tree: Path

    def env(self) -> dict[str, str]:
        return {
            "GIT_DIR": str(self.git_dir),
            "GIT_COMMON_DIR": str(self.common_dir),
            "GIT_WORK_TREE": str(self.work_tree),
        }


class GitDirChanged(GitError):
    """A linked worktree of a repository flowd works on whose admin files no longer name it: its
    lane rewrote them (LaneEscape `gitDir`); flowd runs no git there until they are put back."""


# The repositories flowd works on (their common dir: (checkout, its git dir)), and each linked
# worktree's admin dir as flowd first found it (docs/sandbox.md "flowd's own git").
_REPOS: dict[Path, tuple[Path, Path]] = {}
_ADMINS: dict[str, Path] = {}
_PIN_GUARD = threading.Lock()


def register_repo(root: Path, git_dir: Path, common_dir: Path) -> None:
    """flowd works on the checkout `root`: its git commands there and in its linked worktrees are
    pinned (`pin_of`)."""
    with _PIN_GUARD:
        _REPOS[Path(common_dir)] = (Path(root), Path(git_dir))


def _claims(admin: Path, dotgit: str) -> bool:
    """Whether the admin dir `admin` (a real directory, no link) names `dotgit` in its `gitdir`:
    read as data, never followed (git writes the worktree's real path there, relative to the
    admin dir with `worktree.useRelativePaths`)."""
    try:
        if not os.path.isdir(admin) or os.path.islink(admin):
            return False
    except OSError:
        return False
    said = small_file(admin / "gitdir")
    return said is not None and os.path.normpath(os.path.join(admin, said)) == dotgit


def small_file(path: str | Path) -> str | None:
    """The text of a small git file a lane may have replaced (a `.git` file, an admin dir's
    `gitdir`), stripped: read as data from a regular file only, no link read through, no FIFO
    waited on (`read_regular`), at most 64 KiB."""
    data = read_regular(path, 65536)
    return None if data is None else data.decode("utf-8", "surrogateescape").strip()


def named_by_dotgit(wt: str) -> Path | None:
    """Where the worktree's `.git` file points: a hint and a tiebreak only, never the answer."""
    line = small_file(os.path.join(wt, ".git"))
    if line is None or not line.startswith("gitdir:"):
        return None
    named = Path(line.removeprefix("gitdir:").strip())
    return _admin_named(Path(os.path.normpath(named if named.is_absolute() else Path(wt) / named)))


def _admin_named(gitdir: Path) -> Path:
    """The admin dir a `.git` file's git dir stands for: a lane repository (flowd/vcs/lane_repo.py,
    `<admin>/flowd-git`) stands for the admin dir it lies in."""
    return gitdir.parent if gitdir.name == LANE_GIT else gitdir


def admin_of(common_dir: Path, wt: Path) -> Path | None:
    """The admin dir of the linked worktree `wt` in the repository whose common dir is
    `common_dir`, found from flowd's side: the one `<common>/worktrees/<id>` whose `gitdir` names
    `wt` (the lane may write its own admin dir's files, never another's name); the one flowd
    found before when its `gitdir` was rewritten since. None: not a worktree of that repository.
    GitDirChanged: the admin files contradict each other and nothing tells which is right."""
    real = os.path.realpath(wt)
    dotgit = os.path.join(real, ".git")
    known = _ADMINS.get(real)
    if known is not None and known.parent != common_dir / "worktrees":
        known = None  # met in another repository
    if known is not None and _claims(known, dotgit):
        return known
    try:
        names = sorted(os.listdir(common_dir / "worktrees"))
    except OSError:
        names = []
    found = [common_dir / "worktrees" / n for n in names if _claims(common_dir / "worktrees" / n, dotgit)]
    if len(found) > 1:
        named = named_by_dotgit(real)
        found = [a for a in found if a == known] or [a for a in found if a == named]
        if len(found) != 1:
            raise GitDirChanged(
                f"{len(names)} git admin dirs in {common_dir / 'worktrees'} name {real} (gitDir)"
            )
    if found:
        with _PIN_GUARD:
            _ADMINS[real] = found[0]
        return found[0]
    if known is not None and known.is_dir() and not known.is_symlink() and not _claimed_back(known, dotgit):
        return known  # its `gitdir` was rewritten: flowd still knows which admin dir it is
    return None


def _claimed_back(admin: Path, dotgit: str) -> bool:
    """Whether the worktree `admin`'s `gitdir` names (another than `dotgit`) names `admin` back in
    its `.git` file: then `admin` is that worktree's, git having given the name again after the
    worktree flowd met under it was removed (a merge-train slot made anew), not an admin dir of
    ours whose `gitdir` a lane rewrote. Putting it "back" would take it from that worktree."""
    said = small_file(admin / "gitdir")
    if said is None:
        return False
    other = os.path.normpath(os.path.join(admin, said))
    return other != dotgit and named_by_dotgit(os.path.dirname(other)) == admin


def pin_of(cwd: Path) -> Pin | None:
    """The pin of a git command run in `cwd`: the checkout of a repository flowd works on, or the
    top of one of its linked worktrees; None elsewhere (a folder inside a worktree, a submodule,
    a repository flowd does not work on: those run with the settings sealed only).
    GitDirChanged: a worktree whose `.git` file names one of these repositories' admin dirs while
    none names it back (its lane rewrote `gitdir`)."""
    real = os.path.realpath(cwd)
    repos = list(_REPOS.items())
    for common, (root, git_dir) in repos:
        if real == str(root):
            return Pin(git_dir, common, root)
    if not repos or not os.path.isfile(os.path.join(real, ".git")):
        return None
    named = named_by_dotgit(real)
    first = [r for r in repos if named is not None and named.parent.parent == r[0]]
    for common, _ in first + [r for r in repos if r not in first]:
        admin = admin_of(common, Path(real))
        if admin is not None:
            return Pin(admin, common, Path(real))
    known = _ADMINS.get(real)
    if first or (known is not None and known.parent.parent in _REPOS):
        raise GitDirChanged(
            f"the git admin files of the worktree {real} do not name it any more (gitDir); "
            "flowd runs no git there until they are put back"
        )
    return None


def git_env(extra: dict[str, str] | None = None, pin: Pin | None = None) -> dict[str, str]:
    """The environment of one of flowd's own git commands: `pin` names the repository it works
    on (git then follows no `.git` file and no `commondir`), and nothing a config file says can
    start a command."""
    # Built per call (cheap) so a changed environment, as in tests, is always honoured.
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV and k not in _DROPPED_ENV}
    env.update(_FIXED_ENV)
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    # Appended to any GIT_CONFIG_COUNT list the environment already has (git 2.31 and later).
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    keys = {env.get(f"GIT_CONFIG_KEY_{i}", "").lower() for i in range(count)}
    ours = [_NO_HOOKS, *_SEALED] + ([] if _WORKERS[0].lower() in keys else [_WORKERS])
    for n, (key, value) in enumerate(ours, start=count):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(count + len(ours))
    if pin is not None:
        env.update(pin.env())
    if extra:
        env.update(extra)
    return env


def alternates(stores: Sequence[Path], sep: str = os.pathsep) -> str:
    """Object directories as git reads them from `GIT_ALTERNATE_OBJECT_DIRECTORIES` (`sep` the
    path separator) or an `objects/info/alternates` file (a newline): each as it is, or C-quoted
    when it holds the separator, a quote, a backslash or a control character (git unquotes an
    entry that starts with `"`; a repository under `a:b/` was split in two and its lanes' git
    found no objects)."""
    return sep.join(_quoted_path(str(store), sep) for store in stores)


def _quoted_path(path: str, sep: str) -> str:
    if not any(c in path for c in (sep, '"', "\\")) and all(c >= " " for c in path):
        return path
    return '"' + "".join(_C_ESCAPES.get(c, c if c >= " " else f"\\{ord(c):03o}") for c in path) + '"'


_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def config_value(text: str) -> str:
    """`text` as a value in a git config file, quoted (a `"`, `\\`, `;` or `#` in a path would
    otherwise end or break it: git refused the whole file)."""
    return '"' + "".join(_C_ESCAPES.get(c, c) for c in text) + '"'


def git_reason(proc: subprocess.CompletedProcess[str]) -> str:
    """Git's own explanation: the last fatal/error line, else the last non-blank output line."""
    raw = [ln.rstrip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
    for i in range(len(raw) - 1, -1, -1):
        for prefix in ("fatal: ", "error: "):
            if raw[i].startswith(prefix):
                line = raw[i][len(prefix) :].rstrip(".")
                if line.endswith(":"):
                    # "...would be overwritten by merge:" is followed by the paths, tab-indented.
                    listed = [ln.strip() for ln in raw[i + 1 :] if ln.startswith("\t")]
                    line = f"{line} {', '.join(listed)}" if listed else line.rstrip(":")
                return line
    return raw[-1].strip().rstrip(".") if raw else f"git exited with code {proc.returncode}"


def run_git(
    cwd: Path,
    args: Sequence[str],
    what: str,
    *,
    ok_codes: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in `cwd`; a non-accepted exit raises GitError("<what>: <git's reason>")."""
    pin = pin_of(cwd)
    began = time.time()
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=git_env(env, pin),
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        if not cwd.is_dir():
            raise GitError(f"{what}: the directory {cwd} does not exist") from exc
        raise InputError("git is not installed or not on PATH; install git and try again") from exc
    finally:
        if pin is not None:
            _note_own(str(pin.work_tree), began, time.time())
    if proc.returncode not in ok_codes:
        raise GitError(f"{what}: {git_reason(proc)}", detail=(proc.stderr + proc.stdout).strip())
    return proc


# When flowd's own git commands ran in each work tree (the latest few): detection takes what
# they wrote for flowd's, never a lane's (docs/sandbox-detection.md "Who is blamed").
_OWN_RUNS: dict[str, list[tuple[float, float]]] = {}
_OWN_KEPT = 64


def _note_own(work_tree: str, began: float, ended: float) -> None:
    with _PIN_GUARD:
        runs = _OWN_RUNS.setdefault(work_tree, [])
        runs.append((began, ended))
        del runs[:-_OWN_KEPT]


def own_git_runs(work_tree: Path) -> list[tuple[float, float]]:
    """(start, end) of flowd's own latest git commands in `work_tree`, oldest first."""
    with _PIN_GUARD:
        return list(_OWN_RUNS.get(os.path.realpath(work_tree), ()))


def split_z(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def not_flow(paths: list[str]) -> list[str]:
    return [p for p in paths if not (p + "/").startswith(FLOW_DIR)]


def private_git_dir(wt: Path) -> Path | None:
    """The git dir of the worktree (or checkout) `wt`; None without one. For a repository flowd
    works on, the one flowd pins (`pin_of`: never where a lane's `.git` file points); elsewhere
    read from its `.git`."""
    try:
        pin = pin_of(wt)
    except GitDirChanged:
        return None
    if pin is not None:
        return pin.git_dir
    dotgit = Path(wt) / ".git"
    if dotgit.is_dir():
        return dotgit
    line = small_file(dotgit)
    if line is None or not line.startswith("gitdir:"):
        return None
    gitdir = Path(line.removeprefix("gitdir:").strip())
    return _admin_named(gitdir if gitdir.is_absolute() else Path(wt) / gitdir)


def unchecked_out(wt: Path) -> bool:
    """`wt` is a worktree git records whose checkout was never made (it has no index yet): one
    added with `--no-checkout`, by flowd on purpose or by a process killed before the checkout."""
    admin = private_git_dir(wt)
    return admin is not None and admin.is_dir() and not (admin / "index").exists()


def same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def remove_tree(path: Path, what: str) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GitError(f"{what}: {exc.strerror or exc}") from exc


def toplevel(cwd: Path) -> Path | None:
    """The root of the checkout holding `cwd`, or None outside any (no GitPython: it is quick)."""
    try:
        proc = run_git(cwd, ["rev-parse", "--show-toplevel"], "", ok_codes=range(256))
    except FlowdError:
        return None
    top = proc.stdout.strip()
    return Path(top) if proc.returncode == 0 and top else None
