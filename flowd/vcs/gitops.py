"""Git for the engine: branches, worktrees, commits, merges, rollback, restore and diffs.

Every function blocks (the engine calls them in worker threads) and every failure is a
`GitError` (a FlowdError) whose message is one sentence naming the repository, worktree or
branch involved, never a raw git exception.

Almost everything runs the git CLI directly: GitPython spawns the same processes with extra
overhead on the hot path and has no worktree support. GitPython is used only to discover the
repository, where its parent-directory search and error types are what we want.

Nothing here ever runs a mutating command in the user's own checkout (`Repo.root`): story and
epic work happens in linked worktrees outside the repository, and the guard `_owned_worktree`
refuses a mutation aimed at the user's checkout.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base import layout
from flowd.base.errors import EXIT_FAILED, FlowdError, InputError

FLOW_DIR = ".flow/"

# Variables that would point git at another repository or index than the one we name.
_LEAKY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")

# Parsable messages ("nothing to commit", "Already up to date") and never a prompt.
_FIXED_ENV = {"LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"}

# Worktree and branch bookkeeping touch shared files of the common git dir
# (.git/worktrees/, packed-refs); one lock per repository keeps concurrent stories from racing.
_STRUCT_LOCKS: dict[str, threading.Lock] = {}
_STRUCT_LOCKS_GUARD = threading.Lock()


class GitError(FlowdError):
    """A git operation failed; the run cannot go on with this story (or at all)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    branch: str | None  # short name; None when detached
    head: str | None  # None before the first commit
    locked: bool
    prunable: bool  # registered, but its directory is gone


@dataclass(frozen=True)
class MergeResult:
    ok: bool
    commit: str | None  # HEAD after the merge (the merge commit, or the unchanged head)
    conflicts: list[str] = field(default_factory=list)
    already_merged: bool = False


# The user's hooks (a `core.hooksPath` in ~/.gitconfig, husky, pre-commit) never run on flowd's
# own git commands: `--no-verify` skips only some (pre-commit, commit-msg, pre-merge-commit), not
# post-checkout, post-commit, post-merge or reference-transaction (docs/repositories.md).
_NO_HOOKS = ("core.hooksPath", os.devnull)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # Built per call (cheap) so a changed environment, as in tests, is always honoured.
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
    env.update(_FIXED_ENV)
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    # Appended to any GIT_CONFIG_COUNT list the environment already has (git 2.31 and later).
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    env[f"GIT_CONFIG_KEY_{count}"], env[f"GIT_CONFIG_VALUE_{count}"] = _NO_HOOKS
    env["GIT_CONFIG_COUNT"] = str(count + 1)
    if extra:
        env.update(extra)
    return env


def _reason(proc: subprocess.CompletedProcess[str]) -> str:
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


def _git(
    cwd: Path,
    args: Sequence[str],
    what: str,
    *,
    ok_codes: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in `cwd`; a non-accepted exit raises GitError("<what>: <git's reason>")."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=_env(env),
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
    if proc.returncode not in ok_codes:
        raise GitError(f"{what}: {_reason(proc)}", detail=(proc.stderr + proc.stdout).strip())
    return proc


def _split_z(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def _not_flow(paths: list[str]) -> list[str]:
    return [p for p in paths if not (p + "/").startswith(FLOW_DIR)]


# The files worktree bootstrap copied into a worktree (docs/worktree-bootstrap.md) are the user's
# (`.env`, keys): listed in the worktree's private git dir, out of the agents' reach, so that no
# flowd commit, diff or perimeter listing takes them even after a story's `.gitignore` stops
# ignoring them.
_BOOTSTRAPPED = "flowd-bootstrapped"


def private_git_dir(wt: Path) -> Path | None:
    """The git dir of the worktree (or checkout) `wt`, read from its `.git`; None without one."""
    return _private_git_dir(wt)


def _private_git_dir(wt: Path) -> Path | None:
    dotgit = Path(wt) / ".git"
    if dotgit.is_dir():
        return dotgit
    try:
        line = dotgit.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = Path(line.removeprefix("gitdir:").strip())
    return gitdir if gitdir.is_absolute() else Path(wt) / gitdir


def mark_bootstrapped(wt: Path, paths: Sequence[str]) -> None:
    """Remember `paths` (repository-relative) as copied into `wt` by worktree bootstrap."""
    _write_bootstrapped(wt, bootstrapped(wt) | set(paths))


def _write_bootstrapped(wt: Path, listed: Iterable[str]) -> None:
    private = _private_git_dir(wt)
    if private is None:
        return
    target = private / _BOOTSTRAPPED
    tmp = target.with_name(f".{_BOOTSTRAPPED}.{os.getpid()}.tmp")
    tmp.write_text("".join(f"{p}\0" for p in sorted(listed)), encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, target)


def bootstrapped(wt: Path) -> frozenset[str]:
    """The paths worktree bootstrap copied into `wt` (empty when it copied none)."""
    private = _private_git_dir(wt)
    if private is None:
        return frozenset()
    try:
        text = (private / _BOOTSTRAPPED).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return frozenset()
    return frozenset(_split_z(text))


def _stage_all(wt: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Stage every change in `wt` except `.flow/` and the bootstrapped files.

    `.flow/` is kept out by unstaging it after `add -A`, not by an `:(exclude)` pathspec: git
    refuses such an add (exit 1, "paths are ignored") when `.flow/` is in info/exclude and also
    holds files a team tracks (`.flow/config.toml`, `.flow/roster.toml`). Resetting it leaves a
    tracked settings file exactly as its branch has it, whatever an agent did to the copy in the
    worktree (docs/repositories.md).
    """
    _git(wt, ["add", "-A", "--", "."], what, env=env)
    _git(wt, ["reset", "-q", "--", FLOW_DIR.rstrip("/")], what, env=env)
    _unstage_bootstrapped(wt, what, env)


def _unstage_bootstrapped(wt: Path, what: str, env: dict[str, str] | None = None) -> None:
    private = _private_git_dir(wt)
    listing = private / _BOOTSTRAPPED if private is not None else None
    if listing is None or not listing.is_file() or listing.stat().st_size == 0:
        return
    literal = {**(env or {}), "GIT_LITERAL_PATHSPECS": "1"}
    _git(wt, ["reset", "-q", f"--pathspec-from-file={listing}", "--pathspec-file-nul"], what, env=literal)


def _check_rel(wt: Path, path: str) -> Path:
    """A repository-relative path that stays inside the worktree, or InputError."""
    p = Path(path)
    if not path or p.is_absolute() or ".." in p.parts:
        raise InputError(f"path {path!r} must be relative to the worktree {wt} and stay inside it")
    return wt / p


class Repo:
    """The user's repository: the checkout flowd was started in, and its shared git dir."""

    def __init__(self, root: Path, git_dir: Path | None = None, common_dir: Path | None = None) -> None:
        self.root = Path(root).resolve()
        if git_dir is None or common_dir is None:
            out = _git(
                self.root,
                ["rev-parse", "--absolute-git-dir", "--git-common-dir"],
                f"could not read the git directory of {self.root}",
            ).stdout.splitlines()
            git_dir = Path(out[0])
            common_dir = Path(out[1]) if Path(out[1]).is_absolute() else self.root / out[1]
        self.git_dir = git_dir.resolve()
        self.common_dir = common_dir.resolve()
        self._identity: list[str] | None = None
        key = str(self.common_dir)
        with _STRUCT_LOCKS_GUARD:
            # Worktree changes take turns per repository (a clone on a lane node swaps in its
            # node-wide lock: flowd/engine/lanes/node.py).
            self._lock: AbstractContextManager[object] = _STRUCT_LOCKS.setdefault(key, threading.Lock())

    def __repr__(self) -> str:
        return f"Repo({str(self.root)!r})"

    @classmethod
    def discover(cls, path: Path | str) -> Repo:
        """The checkout containing `path`; InputError if there is none or it has no commits."""
        import git  # GitPython: only here, and slow to import (`flowd serve` starts without it)

        where = Path(path).resolve()
        try:
            grepo = git.Repo(where, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise InputError(f"{where} is not a git repository; run flowd inside a git checkout")
        try:
            if grepo.bare or grepo.working_tree_dir is None:
                raise InputError(f"{where} is a bare git repository; run flowd inside a checkout")
            if not grepo.head.is_valid():
                raise InputError(
                    f"the git repository at {grepo.working_tree_dir} has no commits yet; "
                    "make a first commit and try again"
                )
            return cls(Path(grepo.working_tree_dir), Path(grepo.git_dir), Path(grepo.common_dir))
        finally:
            grepo.close()

    # --- repository-wide -------------------------------------------------------------------

    def _run(self, args: Sequence[str], what: str, *, ok_codes: Sequence[int] = (0,)) -> str:
        return _git(self.root, args, what, ok_codes=ok_codes).stdout

    def ensure_flow_excluded(self) -> None:
        """Add `.flow/` to the shared info/exclude once, so flowd's state never shows as untracked."""
        exclude = self.common_dir / "info" / "exclude"
        try:
            text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
            if any(line.strip() in (".flow/", "/.flow/", ".flow", "/.flow") for line in text.splitlines()):
                return
            exclude.parent.mkdir(parents=True, exist_ok=True)
            sep = "" if not text or text.endswith("\n") else "\n"
            with exclude.open("a", encoding="utf-8") as handle:
                handle.write(f"{sep}{FLOW_DIR}\n")
        except OSError as exc:
            raise GitError(f"could not add {FLOW_DIR} to {exclude}: {exc.strerror or exc}") from exc

    def lfs_problem(self) -> str | None:
        """Why no worktree can be checked out when the repository keeps files in Git LFS, git is
        set up to run git-lfs for them, and git-lfs is not installed (git says only "the remote
        end hung up unexpectedly"); None otherwise. Without the filter set up, LFS files are
        their pointer files, in worktrees as in the user's checkout."""
        if shutil.which("git-lfs") is not None:
            return None
        configured = _git(
            self.root, ["config", "--get-regexp", r"^filter\.lfs\."], "", ok_codes=range(256)
        ).stdout
        if "git-lfs" not in configured:
            return None
        listed = self._run(
            ["ls-files", "-z", "--", ":(glob)**/.gitattributes"], f"could not list {self.root}"
        )
        for rel in _split_z(listed):
            try:
                text = (self.root / rel).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "filter=lfs" in text:
                return (
                    f"{self.root / rel} keeps files in Git LFS and your git config runs git-lfs for "
                    "them, but git-lfs is not installed; install git-lfs (then `git lfs pull`), or "
                    "remove the filter with `git config --global --remove-section filter.lfs`"
                )
        return None

    def rev_parse(self, ref: str) -> str | None:
        """The commit `ref` names, or None when it names none."""
        proc = _git(
            self.root,
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
            f"could not resolve {ref!r} in {self.root}",
            ok_codes=(0, 1),
        )
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def head(self, ref: str = "HEAD") -> str:
        sha = self.rev_parse(ref)
        if sha is None:
            raise GitError(f"{ref!r} names no commit in the repository at {self.root}")
        return sha

    def branch_exists(self, name: str) -> bool:
        proc = _git(
            self.root,
            ["show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
            f"could not look up branch {name!r} in {self.root}",
            ok_codes=(0, 1),
        )
        return proc.returncode == 0

    def create_branch(self, name: str, start: str) -> None:
        with self._lock:
            self._run(["branch", "--no-track", name, start], f"could not create branch {name!r} at {start!r}")

    def delete_branch(self, name: str, force: bool = False) -> None:
        """Delete branch `name`; a branch that is already gone is no error.

        Without `force`, refuse when the branch holds commits no other local branch has, so work
        is never lost by accident (git's own `-d` compares with the user's HEAD, which says
        nothing about flowd's branches). A branch checked out in a worktree is always refused.
        """
        what = f"could not delete branch {name!r} in {self.root}"
        with self._lock:
            if not force:
                proc = _git(
                    self.root,
                    [
                        "rev-list",
                        "--count",
                        f"refs/heads/{name}",
                        "--not",
                        f"--exclude={name}",
                        "--branches",
                    ],
                    what,
                    ok_codes=range(256),
                )
                if proc.returncode != 0:
                    if not self.branch_exists(name):
                        return
                    raise GitError(f"{what}: {_reason(proc)}", detail=proc.stderr)
                if int(proc.stdout.strip() or 0):
                    raise GitError(
                        f"{what}: it has {proc.stdout.strip()} commit(s) no other branch has "
                        "(delete it with force to discard them)"
                    )
            proc = _git(self.root, ["branch", "-D", "-q", name], what, ok_codes=range(256))
            if proc.returncode != 0 and self.branch_exists(name):
                raise GitError(f"{what}: {_reason(proc)}", detail=proc.stderr)

    def is_ancestor(self, a: str, b: str) -> bool:
        proc = _git(
            self.root,
            ["merge-base", "--is-ancestor", a, b],
            f"could not tell whether {a!r} is an ancestor of {b!r} in {self.root}",
            ok_codes=(0, 1),
        )
        return proc.returncode == 0

    def unmerged_commits(self, branch: str, target: str) -> int:
        """How many commits `branch` has that `target` lacks (0: nothing would be lost)."""
        out = self._run(
            ["rev-list", "--count", f"{target}..{branch}", "--"],
            f"could not count the commits of {branch!r} missing from {target!r}",
        )
        return int(out.strip() or 0)

    def branches(self, prefix: str = "") -> list[str]:
        """Local branch names starting with `prefix` (a `/`-ending prefix lists a folder)."""
        out = self._run(
            ["for-each-ref", "--format=%(refname:short)", "refs/heads/"],
            f"could not list the branches of {self.root}",
        )
        return sorted(b for b in out.splitlines() if b.startswith(prefix))

    # --- worktrees ---------------------------------------------------------------------------

    def worktrees(self) -> list[WorktreeInfo]:
        out = self._run(["worktree", "list", "--porcelain"], f"could not list the worktrees of {self.root}")
        infos: list[WorktreeInfo] = []
        for block in out.strip().split("\n\n"):
            if not block.strip():
                continue
            fields: dict[str, str] = {}
            for line in block.splitlines():
                key, _, value = line.partition(" ")
                fields[key] = value
            path = Path(fields.get("worktree", ""))
            branch = fields.get("branch")
            infos.append(
                WorktreeInfo(
                    path=path,
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    head=fields.get("HEAD") if fields.get("HEAD", "").strip("0") else None,
                    locked="locked" in fields,
                    prunable="prunable" in fields or not path.exists(),
                )
            )
        return infos

    def _worktree_at(self, path: Path) -> WorktreeInfo | None:
        for info in self.worktrees():
            if _same_path(info.path, path):
                return info
        return None

    def worktree_prune(self) -> None:
        with self._lock:
            self._run(["worktree", "prune"], f"could not prune the worktrees of {self.root}")

    def worktree_add_detached(
        self, path: Path, commit: str = "HEAD", *, reclaim: bool = False, beside: bool = False
    ) -> Path:
        """A throwaway worktree at `path` with `commit` checked out and no branch. `reclaim`: the
        path is flowd's own, and git may still record it from a killed `git worktree add` (a
        "missing but locked worktree", which `prune` keeps): take it over (`-f -f`). `beside`:
        while other worktrees are added (no ref moves, and git makes each worktree's record
        with an atomic mkdir), so a long checkout holds none of them up."""
        path = Path(path).absolute()
        force = ["-f", "-f"] if reclaim else []
        with contextlib.nullcontext() if beside else self._lock:
            self._run(
                ["worktree", "add", *force, "--detach", "-q", str(path), commit],
                f"could not check out {commit} at {path}",
            )
        self.sync_submodules(path)
        return path

    def tracked_files(self) -> list[str]:
        """Every file git tracks at the checkout's root, repository-relative."""
        return [
            f
            for f in _split_z(self._run(["ls-files", "-z"], f"could not list the files of {self.root}"))
            if f
        ]

    def ignored_matching(self, patterns: Path) -> list[str]:
        """Untracked files of the user's checkout that git ignores AND the gitignore-syntax file
        `patterns` matches (docs/worktree-bootstrap.md), repository-relative and sorted; `.flow/`
        is never among them. Read-only: git evaluates both sets of patterns."""
        what = f"could not list the ignored files of {self.root} that {patterns} matches"
        listed = self._run(["ls-files", "-z", "--others", "--ignored", f"--exclude-from={patterns}"], what)
        candidates = [p for p in _not_flow(_split_z(listed)) if not p.endswith("/")]
        return sorted(self.ignored_among(self.root, candidates))

    def ignored_among(self, wt: Path, paths: Sequence[str]) -> set[str]:
        """Which of `paths` the ignore rules of the checkout or worktree `wt` ignore."""
        if not paths:
            return set()
        proc = subprocess.run(
            ["git", "check-ignore", "-z", "--stdin"],
            cwd=wt,
            env=_env(),
            input="\0".join(paths) + "\0",
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            check=False,
        )
        if proc.returncode not in (0, 1):
            raise GitError(f"could not ask git which files {wt} ignores: {_reason(proc)}", detail=proc.stderr)
        return set(_split_z(proc.stdout))

    def worktree_add(
        self, path: Path, branch: str, start: str | None = None, *, beside: bool = False
    ) -> Path:
        """A worktree at `path` on `branch`, creating the branch at `start` when it is missing.

        Idempotent: a worktree already there on that branch is returned as is; one whose directory
        was deleted by hand is pruned and recreated (the branch, and so the committed work, stays).
        `beside`: an existing branch checked out while other worktrees are added (as in
        `worktree_add_detached`); what goes wrong is then sorted out under the lock.
        """
        path = Path(path).absolute()
        if beside and start is None:
            proc = _git(self.root, ["worktree", "add", "-q", str(path), branch], "", ok_codes=range(256))
            if proc.returncode == 0:
                self.sync_submodules(path)
                return path
        with self._lock:
            # Fast path: the common case is a fresh worktree on a fresh branch, one git call.
            if start is not None:
                args = ["worktree", "add", "-q", "-b", branch, str(path), start]
            else:
                args = ["worktree", "add", "-q", str(path), branch]
            proc = _git(self.root, args, "", ok_codes=range(256))
            path = path if proc.returncode == 0 else self._worktree_add_slow(path, branch, start, proc)
        self.sync_submodules(path)
        return path

    def _worktree_add_slow(
        self, path: Path, branch: str, start: str | None, first: subprocess.CompletedProcess[str]
    ) -> Path:
        """Work out why the one-call add failed, repair what is ours to repair, and add again."""
        what = f"could not create the worktree {path} on branch {branch!r}"
        infos = self.worktrees()
        here = next((i for i in infos if _same_path(i.path, path)), None)
        if here is not None and not here.prunable:
            if here.branch == branch:
                return path
            raise GitError(f"{what}: that worktree is on {here.branch or 'a detached HEAD'} instead")
        holder = next((i for i in infos if i.branch == branch and not _same_path(i.path, path)), None)
        if holder is not None and not holder.prunable:
            raise GitError(f"{what}: the branch is already checked out in {holder.path}")
        if here is not None or holder is not None:
            # A worktree deleted by hand: forget it, the branch (and its commits) stay.
            _git(self.root, ["worktree", "prune"], what)
        elif path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise GitError(f"{what}: {path} already exists and is not a worktree of {self.root}")
        if self.branch_exists(branch):
            _git(self.root, ["worktree", "add", "-q", str(path), branch], what)
        elif start is None:
            raise GitError(f"{what}: the branch does not exist and no start point was given")
        elif here is None and holder is None:
            raise GitError(f"{what}: {_reason(first)}", detail=first.stderr)
        else:
            _git(self.root, ["worktree", "add", "-q", "-b", branch, str(path), start], what)
        return path

    def worktree_remove(self, path: Path, force: bool = False) -> None:
        """Remove the worktree at `path` (its branch stays). A worktree already gone is no error."""
        path = Path(path).absolute()
        what = f"could not remove the worktree {path}"
        with self._lock:
            args = ["worktree", "remove", *(["--force"] if force else []), str(path)]
            proc = _git(self.root, args, what, ok_codes=range(256))
            if proc.returncode == 0:
                return
            here = self._worktree_at(path)
            if here is None:
                return
            if here.prunable:
                _git(self.root, ["worktree", "prune"], what)
                return
            if _same_path(here.path, self.root):
                raise GitError(f"{what}: it is the user's own checkout")
            if not force and self.is_dirty(path):
                raise GitError(f"{what}: it has uncommitted changes (remove it with force to discard them)")
            if "containing submodules" in proc.stderr:
                # git never removes a worktree with checked-out submodules; their clones live in
                # the worktree's own git dir and go with it (docs/repositories.md).
                _remove_tree(path, what)
                _git(self.root, ["worktree", "prune"], what)
                return
            if not force:
                # Only `.flow/` or bootstrapped files differ: flowd never commits those, so they
                # are not work to keep (an agent's edit of a tracked `.flow/config.toml`).
                again = _git(
                    self.root, ["worktree", "remove", "--force", str(path)], what, ok_codes=range(256)
                )
                if again.returncode == 0:
                    return
            raise GitError(f"{what}: {_reason(proc)}", detail=proc.stderr)

    def discard_worktree(self, path: Path, branch: str) -> str | None:
        """Throw away a worktree (work included) and its branch, leftovers of a killed run too.

        Returns why the worktree could not be removed through git (its folder is deleted anyway),
        or None.
        """
        problem = None
        try:
            self.worktree_remove(path, force=True)
        except FlowdError as exc:
            problem = str(exc)
        if Path(path).exists():
            shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(FlowdError):
            self.worktree_prune()
        if self.branch_exists(branch):
            self.delete_branch(branch, force=True)
        return problem

    def worktree_move(self, old: Path, new: Path) -> Path:
        """Move a worktree, its branch and uncommitted work included."""
        old, new = Path(old).absolute(), Path(new).absolute()
        with self._lock:
            try:
                new.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GitError(f"could not create {new.parent} to move the worktree {old} there") from exc
            _git(
                self.root,
                ["worktree", "move", str(old), str(new)],
                f"could not move the worktree {old} to {new}",
            )
        return new

    def worktree_repair(self, path: Path) -> None:
        """Point git's record of the worktree whose `.git` file is at `path` back at `path` (a
        rename killed before git's own bookkeeping followed it)."""
        path = Path(path).absolute()
        with self._lock:
            self._run(["worktree", "repair", str(path)], f"could not repair the worktree {path}")

    # --- inside a worktree -------------------------------------------------------------------

    def _owned_worktree(self, wt: Path, doing: str) -> Path:
        """`wt` as a path, refusing the user's own checkout for anything that changes files."""
        wt = Path(wt)
        if _same_path(wt, self.root):
            raise GitError(f"refusing to {doing} in {self.root}: flowd never changes the user's checkout")
        return wt

    def _identity_args(self) -> list[str]:
        """`-c user.*` only for what the user has not configured, so commits work on bare machines."""
        if self._identity is None:
            out = _git(
                self.root,
                ["config", "--get-regexp", r"^user\.(name|email)$"],
                f"could not read the git identity of {self.root}",
                ok_codes=(0, 1),
            ).stdout
            keys = {line.split(" ", 1)[0].lower() for line in out.splitlines() if " " in line}
            args: list[str] = []
            name_env = any(os.environ.get(v) for v in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"))
            email_env = any(os.environ.get(v) for v in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL", "EMAIL"))
            if "user.name" not in keys and not name_env:
                args += ["-c", "user.name=flowd"]
            if "user.email" not in keys and not email_env:
                args += ["-c", "user.email=flowd@localhost"]
            self._identity = args
        return self._identity

    def _commit_args(self) -> list[str]:
        # Signing could prompt for a passphrase; flowd's own commits are never signed.
        return [*self._identity_args(), "-c", "commit.gpgsign=false"]

    def head_of(self, wt: Path) -> str:
        return _git(
            Path(wt), ["rev-parse", "HEAD"], f"could not read HEAD of the worktree {wt}"
        ).stdout.strip()

    def status_paths(self, wt: Path) -> list[str]:
        """Every modified, added, deleted or untracked file (each untracked file listed), sorted.

        Renames are reported as their two paths; anything under `.flow/` is left out.
        """
        out = _git(
            Path(wt),
            [
                "status",
                "--porcelain",
                "-z",
                "--no-renames",
                "--untracked-files=all",
                "--ignore-submodules=dirty",
            ],
            f"could not read the status of the worktree {wt}",
        ).stdout
        copied = bootstrapped(wt)
        return sorted(set(_not_flow([entry[3:] for entry in _split_z(out) if entry[3:] not in copied])))

    def is_dirty(self, wt: Path) -> bool:
        return bool(self.status_paths(wt))

    def commit_all(self, wt: Path, message: str) -> str | None:
        """Commit every change in `wt` (untracked files included); None when there was nothing."""
        wt = self._owned_worktree(wt, "commit")
        what = f"could not commit in the worktree {wt}"
        _stage_all(wt, what)
        proc = _git(
            wt,
            [*self._commit_args(), "commit", "-q", "--no-verify", "-m", message],
            what,
            ok_codes=range(256),
        )
        if proc.returncode != 0:
            # The last: only unstaged `.flow/` or bootstrapped changes are left (`_stage_all`).
            nothing = ("nothing to commit", "nothing added to commit", "no changes added to commit")
            if any(said in proc.stdout for said in nothing):
                return None
            raise GitError(f"{what}: {_reason(proc)}", detail=proc.stderr + proc.stdout)
        return self.head_of(wt)

    def changed_files(self, wt: Path, base: str) -> list[str]:
        """Files differing from the merge-base of `base` and HEAD: committed, uncommitted and untracked.

        Repository-relative, sorted, deletions included, renames as both paths, `.flow/` left out.
        """
        wt = Path(wt)
        what = f"could not list the files changed in the worktree {wt} since {base!r}"
        tracked = _git(
            wt,
            [
                "diff",
                "--name-only",
                "-z",
                "--no-renames",
                "--ignore-submodules=dirty",
                "--merge-base",
                base,
                "--",
            ],
            what,
        )
        untracked = _git(wt, ["ls-files", "-z", "--others", "--exclude-standard"], what)
        copied = bootstrapped(wt)
        return sorted(
            set(
                _not_flow(
                    _split_z(tracked.stdout) + [p for p in _split_z(untracked.stdout) if p not in copied]
                )
            )
        )

    def diff(self, wt: Path, base: str) -> str:
        """The patch from the merge-base of `base` and HEAD to the files in `wt`, new files included.

        Untracked files are staged into a throwaway copy of the index, so the worktree's own index
        is left exactly as it was.
        """
        wt = Path(wt)
        what = f"could not diff the worktree {wt} against {base!r}"
        index = Path(
            _git(wt, ["rev-parse", "--path-format=absolute", "--git-path", "index"], what).stdout.strip()
        )
        with tempfile.TemporaryDirectory(prefix="flowd-index-") as tmp:
            tmp_index = Path(tmp) / "index"
            if index.exists():
                shutil.copyfile(index, tmp_index)
            env = {"GIT_INDEX_FILE": str(tmp_index)}
            _stage_all(wt, what, env)
            return _git(wt, ["diff", "--cached", "--merge-base", base, "--"], what, env=env).stdout

    def merge(self, wt: Path, branch: str, message: str, *, prefer_incoming: bool = False) -> MergeResult:
        """Merge `branch` into the worktree's branch with a merge commit (`--no-ff`).

        A conflict is aborted (the worktree is left as before) and its paths returned. When `branch`
        is already contained in HEAD nothing is committed and `already_merged` is set.
        `prefer_incoming` resolves conflicting hunks in favour of `branch` (`-X theirs`).
        """
        wt = self._owned_worktree(wt, "merge")
        what = f"could not merge {branch!r} into the worktree {wt}"
        args = [*self._commit_args(), "merge", "--no-ff", "--no-verify", "--no-edit", "-m", message]
        if prefer_incoming:
            args += ["-X", "theirs"]
        proc = _git(wt, [*args, branch], what, ok_codes=range(256))
        if proc.returncode == 0:
            self.sync_submodules(wt)
            already = "Already up to date" in proc.stdout or "Already up-to-date" in proc.stdout
            return MergeResult(ok=True, commit=self.head_of(wt), already_merged=already)
        conflicts = _split_z(_git(wt, ["diff", "--name-only", "-z", "--diff-filter=U"], what).stdout)
        in_progress = (
            _git(wt, ["rev-parse", "-q", "--verify", "MERGE_HEAD"], what, ok_codes=(0, 1)).returncode == 0
        )
        if in_progress or conflicts:
            _git(wt, ["merge", "--abort"], f"could not abort the conflicted merge of {branch!r} in {wt}")
        if conflicts:
            return MergeResult(ok=False, commit=self.head_of(wt), conflicts=sorted(set(conflicts)))
        raise GitError(f"{what}: {_reason(proc)}", detail=proc.stderr + proc.stdout)

    def clear_stale_index_lock(self, wt: Path) -> Path | None:
        """Remove the `index.lock` a git killed mid-command left in `wt`; returns it if there was one.

        Only for flowd's own worktrees, and only while holding the epic lock: then no flowd process
        is running git there, and a lock is what a killed run left behind.
        """
        wt = self._owned_worktree(wt, "clear the index lock")
        out = _git(
            wt,
            ["rev-parse", "--path-format=absolute", "--git-path", "index.lock"],
            f"could not find the index of the worktree {wt}",
        ).stdout.strip()
        lock = Path(out)
        try:
            lock.unlink()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GitError(f"could not remove the stale lock {lock}: {exc.strerror or exc}") from exc
        return lock

    def subjects_since(self, wt: Path, base: str) -> set[str]:
        """Subjects of the commits `wt`'s branch has beyond `base` (empty when git cannot say)."""
        proc = _git(Path(wt), ["log", "--format=%s", f"{base}..HEAD", "--"], "", ok_codes=range(256))
        return set(proc.stdout.splitlines()) if proc.returncode == 0 else set()

    def merge_in_progress(self, wt: Path) -> bool:
        """A merge stopped half-way in `wt` (MERGE_HEAD is set): a process killed mid-merge."""
        return merge_in_progress(Path(wt))

    def check_out_detached(self, wt: Path, commit: str) -> None:
        """Put a throwaway detached worktree exactly at `commit`: tracked files as there, every
        other file removed (ignored ones too: nothing a previous use built is left to fool a gate).
        Cheaper than a new worktree: only the files that differ are written."""
        wt = self._owned_worktree(wt, "check out")
        what = f"could not check out {commit[:10]} in the worktree {wt}"
        if self.merge_in_progress(wt):
            _git(wt, ["merge", "--abort"], what)
        _git(wt, ["checkout", "-q", "--detach", "-f", commit], what)
        _git(wt, ["clean", "-fdxq"], what)
        self.sync_submodules(wt)

    def detach(self, wt: Path) -> None:
        """Let go of `wt`'s branch (HEAD points at its commit instead): no file, index or merge
        state is touched, so it works whatever state a killed run left the worktree in."""
        wt = self._owned_worktree(wt, "detach")
        what = f"could not detach the worktree {wt} from its branch"
        head = _git(wt, ["rev-parse", "--verify", "-q", "HEAD"], what, ok_codes=(0, 1)).stdout.strip()
        if head:
            _git(wt, ["update-ref", "--no-deref", "-m", "flowd: spare worktree", "HEAD", head], what)

    def reset_worktree(self, wt: Path, branch: str, start: str, keep: Sequence[str] = ()) -> None:
        """Make a used worktree exactly what a new `git worktree add -b branch wt start` gives:
        `branch` (re)made at `start` and checked out, every other file removed, ignored ones too
        (but the repository-relative `keep`), submodules at the commits `start` records with
        nothing of their own left. Only what differs from the previous checkout is written.
        `start` may be `branch` itself (an existing branch checked out as it is)."""
        wt = self._owned_worktree(wt, "reset")
        what = f"could not reset the worktree {wt} to {branch!r} at {start!r}"
        self.clear_stale_index_lock(wt)
        args = ["checkout", "-q", "-f", "--no-recurse-submodules"]
        args += [branch] if start == branch else ["-B", branch, start]
        with self._lock:  # the branch ref is shared bookkeeping
            _git(wt, args, what)
        # `checkout` clears MERGE_HEAD and friends; anything a previous use left in the index
        # beyond the commit (an unmerged entry) is gone with `-f`. A kept copy must still be
        # ignored by the new branch's rules, or a later `git add -A` would commit it.
        kept = sorted(self.ignored_among(wt, keep)) if keep else []
        _scrub(wt, what, kept)
        _write_bootstrapped(wt, kept)
        self.sync_submodules(wt)

    def fast_forward(self, wt: Path, commit: str) -> None:
        """Move the worktree and its branch forward to `commit`, a descendant of its HEAD; refuses
        (GitError) when it is not one: the branch moved since `commit` was built on it."""
        wt = self._owned_worktree(wt, "fast-forward")
        _git(
            wt,
            ["merge", "--ff-only", "-q", "--no-verify", commit],
            f"could not fast-forward the worktree {wt} to {commit[:10]}",
        )
        self.sync_submodules(wt)

    def reset_hard(self, wt: Path, commit: str) -> None:
        """Roll the worktree and its branch back to `commit`; untracked files are kept."""
        wt = self._owned_worktree(wt, "reset")
        _git(wt, ["reset", "--hard", "-q", commit], f"could not roll the worktree {wt} back to {commit}")
        self.sync_submodules(wt)

    def restore_paths(self, wt: Path, paths: Sequence[str], from_ref: str) -> None:
        """Make each path (file or folder) in `wt` exactly as it is in `from_ref`.

        A path `from_ref` has is checked out from it (files under it that `from_ref` lacks are
        deleted first); a path it lacks is deleted, tracked or not. The result is staged in the
        worktree's index and not committed: follow with `commit_all`.
        """
        wt = self._owned_worktree(wt, "restore paths")
        if not paths:
            return
        # "src/" would make ls-tree list the folder's contents instead of the folder itself.
        full = {p.rstrip("/"): _check_rel(wt, p) for p in paths}
        what = f"could not restore {len(full)} path(s) in the worktree {wt} from {from_ref!r}"
        listed = _git(wt, ["ls-tree", "-z", from_ref, "--", *full], what).stdout
        modes = {entry.partition("\t")[2]: entry.split(" ", 1)[0] for entry in _split_z(listed)}
        present = [p for p in full if p in modes]
        # A submodule `from_ref` has is only pointed back (checkout, then sync): `git rm` of it
        # would also drop its entry from `.gitmodules`, a change of its own.
        removed = {p: target for p, target in full.items() if modes.get(p) != "160000"}
        if removed:
            _git(wt, ["rm", "-r", "-f", "-q", "--ignore-unmatch", "--", *removed], what)
        for target in removed.values():
            try:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
            except OSError as exc:
                raise GitError(f"{what}: {target} could not be deleted ({exc.strerror or exc})") from exc
        if present:
            _git(wt, ["checkout", from_ref, "--", *present], what)
        self.sync_submodules(wt)

    # --- submodules (docs/repositories.md) ---------------------------------------------------

    def sync_submodules(self, wt: Path) -> None:
        """Check out every submodule of `wt` at the commit its index records, recursively.

        Each is cloned (hardlinked) from a local copy that holds that commit: the user's
        `.git/modules/<name>`, the submodule checked out in the user's checkout, or another
        flowd worktree's copy (a story's new submodule commit reaches the epic this way). Only a
        submodule no local copy holds is fetched from its URL. Nothing is written to the
        repository's shared config: the local source is a `-c` for this one command.
        """
        wt = Path(wt)
        links = _gitlinks(wt)
        if not links:
            return
        what = f"could not check out the submodules of the worktree {wt}"
        overrides: list[str] = []
        for name, rel, sha in links:
            source = next((c for c in self._module_sources(wt, name, rel) if _has_commit(c, sha)), None)
            if source is None:
                continue
            target = wt / rel
            if (target / ".git").exists():
                if not _has_commit(target, sha):
                    _git(
                        target,
                        ["-c", "protocol.file.allow=always", "fetch", "-q", "--no-tags", str(source), sha],
                        what,
                    )
            else:
                overrides += ["-c", f"submodule.{name}.url={source}"]
        # Local clones are the `file` transport, which git (2.38.1 on) refuses for submodules
        # unless allowed; the sources are the user's own repositories.
        args = [
            "-c",
            "protocol.file.allow=always",
            *overrides,
            "submodule",
            "update",
            "--init",
            "--recursive",
            "-q",
        ]
        proc = _git(wt, [*args, "--", *(rel for _, rel, _ in links)], what, ok_codes=range(256))
        if proc.returncode != 0:
            raise GitError(
                f"{what}: {_reason(proc)}; check them out in {self.root} "
                "(git submodule update --init --recursive) so flowd can copy them from there",
                detail=proc.stderr,
            )

    def _module_sources(self, wt: Path, name: str, rel: str) -> list[Path]:
        own = _private_git_dir(wt)
        found = [self.common_dir / "modules" / name]
        if (self.root / rel / ".git").exists():
            found.append(self.root / rel)
        found += sorted((self.common_dir / "worktrees").glob(f"*/modules/{name}"))
        return [c for c in found if c.is_dir() and not (own is not None and c.is_relative_to(own))]


def _gitlinks(wt: Path) -> list[tuple[str, str, str]]:
    """(name, path, recorded commit) of each submodule `.gitmodules` of `wt` declares and its
    index records; empty (one stat, no git) in a repository without submodules."""
    if not (wt / ".gitmodules").is_file():
        return []
    what = f"could not read the submodules of the worktree {wt}"
    declared = _git(
        wt,
        ["config", "-z", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"],
        what,
        ok_codes=(0, 1),
    ).stdout
    names: dict[str, str] = {}
    for entry in _split_z(declared):
        key, _, rel = entry.partition("\n")
        names[rel] = key.removeprefix("submodule.").removesuffix(".path")
    staged = _git(wt, ["ls-files", "-s", "-z", "--", *names], what).stdout if names else ""
    links: list[tuple[str, str, str]] = []
    for entry in _split_z(staged):
        meta, _, rel = entry.partition("\t")
        mode, sha, _stage = meta.split(" ")
        if mode == "160000" and rel in names:
            links.append((names[rel], rel, sha))
    return links


def has_submodules(wt: Path) -> bool:
    """Whether `wt` has (or had) submodules checked out: git then refuses to move it."""
    private = _private_git_dir(Path(wt))
    if private is not None and (private / "modules").is_dir():
        return True
    return any((Path(wt) / rel / ".git").exists() for _, rel, _ in _gitlinks(Path(wt)))


def _literal_pattern(rel: str) -> str:
    """A gitignore pattern matching exactly the repository-relative file `rel`."""
    escaped = "".join("\\" + ch if ch in "\\*?[" else ch for ch in rel)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped


def _scrub(where: Path, what: str, keep: Sequence[str] = ()) -> None:
    """Every file of the checkout `where` back to its index (already its HEAD), every untracked
    and ignored one removed but `keep`; then the same inside each checked-out submodule,
    recursively (the superproject's `checkout -f` and `clean` leave submodules' files alone)."""
    _git(where, ["reset", "-q", "--hard"], what)
    excludes = [arg for rel in keep for arg in ("-e", _literal_pattern(rel))]
    # -ff: nested repositories too (a submodule the new commit no longer has).
    _git(where, ["clean", "-ffdxq", *excludes], what)
    for _name, rel, _sha in _gitlinks(where):
        if (where / rel / ".git").exists():
            _scrub(where / rel, what)


def _has_commit(where: Path, sha: str) -> bool:
    proc = _git(where, ["cat-file", "-e", f"{sha}^{{commit}}"], "", ok_codes=range(256))
    return proc.returncode == 0


def _remove_tree(path: Path, what: str) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GitError(f"{what}: {exc.strerror or exc}") from exc


def init_repo(path: Path, message: str, branch: str = "main") -> Repo:
    """A repository flowd itself creates (the demo's sample) in the existing directory `path`, on
    `branch`, with every file already there committed: never the user's checkout."""
    path = Path(path)
    what = f"could not create a git repository in {path}"
    _git(path, ["init", "-q", "-b", branch], what)
    repo = Repo(path)
    _git(path, ["add", "-A"], what)
    _git(path, [*repo._commit_args(), "commit", "-q", "--no-verify", "-m", message], what)
    return repo


def toplevel(cwd: Path) -> Path | None:
    """The root of the checkout holding `cwd`, or None outside any (no GitPython: it is quick)."""
    try:
        proc = _git(cwd, ["rev-parse", "--show-toplevel"], "", ok_codes=range(256))
    except FlowdError:
        return None
    top = proc.stdout.strip()
    return Path(top) if proc.returncode == 0 and top else None


def merge_in_progress(worktree: Path) -> bool:
    """Whether git is in the middle of a merge in `worktree` (its git dir holds MERGE_HEAD).

    Read from the files, with no git process: the server asks this on every batch of changes.
    """
    dotgit = worktree / ".git"
    try:
        if dotgit.is_dir():
            return (dotgit / "MERGE_HEAD").exists()
        first = dotgit.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return False
    if not first.startswith("gitdir:"):
        return False
    gitdir = Path(first.removeprefix("gitdir:").strip())
    return (gitdir if gitdir.is_absolute() else worktree / gitdir).joinpath("MERGE_HEAD").exists()


def _same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def worktree_default_root(repo: Repo) -> Path:
    """`<repo>/../<repoName>.flowd`: beside the repository, so agents never wander into it."""
    return layout.default_worktree_root(repo.root)


def worktree_root(repo: Repo, configured: str | None) -> Path:
    """The worktree root: `worktreeRoot` from config.toml (relative to the repository) or the default."""
    if not configured:
        return worktree_default_root(repo)
    return (repo.root / Path(configured).expanduser()).resolve()
