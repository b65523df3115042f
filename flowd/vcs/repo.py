"""The user's repository as flowd sees it: the checkout flowd was started in and its shared git
dir; refs and branches, the commit identity, what its ignore rules say. `Worktrees` (worktree
bookkeeping) and `WorktreeChanges` (work inside one) stand on it; `gitops.Repo` is the whole."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from flowd.base.layout import as_shared
from flowd.vcs.gitcli import (
    FLOW_DIR,
    GitError,
    git_env,
    git_reason,
    not_flow,
    pin_of,
    register_repo,
    run_git,
    same_path,
    split_z,
)
from flowd.vcs.submodules import sync_submodules

# Worktree and branch bookkeeping touch shared files of the common git dir
# (.git/worktrees/, packed-refs); one lock per repository keeps concurrent stories from racing.
_STRUCT_LOCKS: dict[str, threading.Lock] = {}
_STRUCT_LOCKS_GUARD = threading.Lock()


# What git leaves in a checkout's git dir while an operation waits for you.
_UNFINISHED = (
    ("rebase-merge", "rebase"),
    ("rebase-apply", "rebase"),
    ("MERGE_HEAD", "merge"),
    ("CHERRY_PICK_HEAD", "cherry-pick"),
    ("REVERT_HEAD", "revert"),
    ("BISECT_LOG", "bisect"),
)


class RepoBase:
    """The repository-wide part of `gitops.Repo`."""

    def __init__(self, root: Path, git_dir: Path | None = None, common_dir: Path | None = None) -> None:
        self.root = Path(root).resolve()
        if git_dir is None or common_dir is None:
            out = run_git(
                self.root,
                ["rev-parse", "--absolute-git-dir", "--git-common-dir"],
                f"could not read the git directory of {self.root}",
            ).stdout.splitlines()
            git_dir, common_dir = as_shared(
                Path(out[0]), Path(out[1]) if Path(out[1]).is_absolute() else self.root / out[1]
            )
        self.git_dir = git_dir.resolve()
        self.common_dir = common_dir.resolve()
        register_repo(self.root, self.git_dir, self.common_dir)
        self._identity: list[str] | None = None
        key = str(self.common_dir)
        with _STRUCT_LOCKS_GUARD:
            # Worktree changes take turns per repository (a clone on a lane node swaps in its
            # node-wide lock: flowd/engine/lanes/node.py).
            self._lock: AbstractContextManager[object] = _STRUCT_LOCKS.setdefault(key, threading.Lock())

    def __repr__(self) -> str:
        return f"Repo({str(self.root)!r})"

    # --- repository-wide -------------------------------------------------------------------

    def _run(self, args: Sequence[str], what: str, *, ok_codes: Sequence[int] = (0,)) -> str:
        return run_git(self.root, args, what, ok_codes=ok_codes).stdout

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

    def unfinished(self) -> str | None:
        """The git operation your checkout is in the middle of (a rebase, merge, cherry-pick,
        revert or bisect), named with the file that says so; None when there is none. Its
        `HEAD` is then a step of that operation, not the branch you work on."""
        for marker, what in _UNFINISHED:
            if (self.git_dir / marker).exists():
                return f"a {what} ({self.git_dir / marker})"
        return None

    def lfs_problem(self) -> str | None:
        """Why no worktree can be checked out when the repository keeps files in Git LFS, git is
        set up to run git-lfs for them, and git-lfs is not installed (git says only "the remote
        end hung up unexpectedly"); None otherwise. Without the filter set up, LFS files are
        their pointer files, in worktrees as in the user's checkout."""
        if shutil.which("git-lfs") is not None:
            return None
        configured = run_git(
            self.root, ["config", "--get-regexp", r"^filter\.lfs\."], "", ok_codes=range(256)
        ).stdout
        if "git-lfs" not in configured:
            return None
        listed = self._run(
            ["ls-files", "-z", "--", ":(glob)**/.gitattributes"], f"could not list {self.root}"
        )
        for rel in split_z(listed):
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
        proc = run_git(
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
        proc = run_git(
            self.root,
            ["show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
            f"could not look up branch {name!r} in {self.root}",
            ok_codes=(0, 1),
        )
        return proc.returncode == 0

    def create_branch(self, name: str, start: str) -> None:
        with self._lock:
            self._run(["branch", "--no-track", name, start], f"could not create branch {name!r} at {start!r}")

    def file_text(self, ref: str, path: str) -> str | None:
        """The text of the regular file at repository-relative `path` in `ref`; None when `ref`
        holds no such file there (a folder, a link, a submodule, or nothing)."""
        what = f"could not read {path} in {ref}"
        listed = run_git(self.root, ["ls-tree", "-z", ref, "--", path], what, ok_codes=range(256))
        fields = listed.stdout.split("\t", 1)[0].split() if listed.returncode == 0 else []
        if len(fields) != 3 or fields[0] not in ("100644", "100755") or fields[1] != "blob":
            return None
        blob = run_git(self.root, ["cat-file", "blob", fields[2]], what, ok_codes=range(256))
        return blob.stdout if blob.returncode == 0 else None

    def move_branch(self, name: str, to: str, expected: str) -> None:
        """Point branch `name` at `to` if it still points at `expected` (GitError otherwise): a
        branch checked out in no worktree's files (an unchecked-out one) moved in one write."""
        with self._lock:
            self._run(
                ["update-ref", "-m", f"flowd: {name} to {to[:10]}", f"refs/heads/{name}", to, expected],
                f"could not move branch {name!r} from {expected[:10]} to {to[:10]}",
            )

    def delete_branch(self, name: str, force: bool = False) -> None:
        """Delete branch `name`; a branch that is already gone is no error.

        Without `force`, refuse when the branch holds commits no other local branch has, so work
        is never lost by accident (git's own `-d` compares with the user's HEAD, which says
        nothing about flowd's branches). A branch checked out in a worktree is always refused.
        """
        what = f"could not delete branch {name!r} in {self.root}"
        with self._lock:
            if not force:
                proc = run_git(
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
                    raise GitError(f"{what}: {git_reason(proc)}", detail=proc.stderr)
                if int(proc.stdout.strip() or 0):
                    raise GitError(
                        f"{what}: it has {proc.stdout.strip()} commit(s) no other branch has "
                        "(delete it with force to discard them)"
                    )
            proc = run_git(self.root, ["branch", "-D", "-q", name], what, ok_codes=range(256))
            if proc.returncode != 0 and self.branch_exists(name):
                raise GitError(f"{what}: {git_reason(proc)}", detail=proc.stderr)

    def is_ancestor(self, a: str, b: str) -> bool:
        proc = run_git(
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

    def tracked_files(self) -> list[str]:
        """Every file git tracks at the checkout's root, repository-relative."""
        return [
            f for f in split_z(self._run(["ls-files", "-z"], f"could not list the files of {self.root}")) if f
        ]

    def ignored_matching(self, patterns: Path) -> list[str]:
        """Untracked files of the user's checkout that git ignores AND the gitignore-syntax file
        `patterns` matches (docs/worktree-bootstrap.md), repository-relative and sorted; `.flow/`
        is never among them. Read-only: git evaluates both sets of patterns."""
        what = f"could not list the ignored files of {self.root} that {patterns} matches"
        listed = self._run(["ls-files", "-z", "--others", "--ignored", f"--exclude-from={patterns}"], what)
        candidates = [p for p in not_flow(split_z(listed)) if not p.endswith("/")]
        return sorted(self.ignored_among(self.root, candidates))

    def ignored_among(self, wt: Path, paths: Sequence[str]) -> set[str]:
        """Which of `paths` the ignore rules of the checkout or worktree `wt` ignore."""
        if not paths:
            return set()
        proc = subprocess.run(
            ["git", "check-ignore", "-z", "--stdin"],
            cwd=wt,
            env=git_env(pin=pin_of(wt)),
            input="\0".join(paths) + "\0",
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            check=False,
        )
        if proc.returncode not in (0, 1):
            raise GitError(
                f"could not ask git which files {wt} ignores: {git_reason(proc)}", detail=proc.stderr
            )
        return set(split_z(proc.stdout))

    def _owned_worktree(self, wt: Path, doing: str) -> Path:
        """`wt` as a path, refusing the user's own checkout for anything that changes files."""
        wt = Path(wt)
        if same_path(wt, self.root):
            raise GitError(f"refusing to {doing} in {self.root}: flowd never changes the user's checkout")
        return wt

    def _identity_args(self) -> list[str]:
        """`-c user.*` only for what the user has not configured, so commits work on bare machines."""
        if self._identity is None:
            out = run_git(
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

    def sync_submodules(self, wt: Path) -> None:
        """Check out every submodule of `wt` at the commit its index records (`submodules.py`)."""
        sync_submodules(self.root, self.common_dir, wt)


def flow_outside_sparse(root: Path) -> str | None:
    """Why flowd cannot read your `.flow/` in the checkout `root`: it is tracked but your sparse
    checkout leaves it out (its files marked skip-worktree, not on disk), so the roster and
    settings would read as missing; None otherwise (docs/repositories.md "Your sparse checkout")."""
    if os.path.lexists(root / ".flow"):
        return None
    listed = run_git(root, ["ls-files", "-t", "-z", "--", ".flow/"], "", ok_codes=range(256)).stdout
    if not any(entry.startswith("S ") for entry in listed.split("\0")):
        return None
    return (
        f"{root / '.flow'} is tracked but outside your sparse checkout, so flowd cannot read "
        "its roster and settings; add it with `git sparse-checkout add .flow`"
    )
