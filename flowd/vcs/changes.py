"""Work inside one of flowd's worktrees: status, changed files and diffs, commits, merges, and
putting a worktree back (detach, reset, fast-forward, roll back, restore paths). Nothing here
changes the user's own checkout: `_owned_worktree` refuses it."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base import leftovers
from flowd.base.errors import InputError
from flowd.base.fsio import open_regular
from flowd.vcs import index_reset
from flowd.vcs.bootstrapped import bootstrapped, stage_all, write_bootstrapped
from flowd.vcs.gitcli import GitError, git_reason, not_flow, private_git_dir, run_git, split_z
from flowd.vcs.incoming import Refused
from flowd.vcs.quarantine import scratch, take_in_scratch
from flowd.vcs.repo import RepoBase
from flowd.vcs.submodules import scrub


@dataclass(frozen=True)
class MergeResult:
    ok: bool
    commit: str | None  # HEAD after the merge (the merge commit, or the unchanged head)
    conflicts: list[str] = field(default_factory=list)
    already_merged: bool = False


def check_rel(wt: Path, path: str) -> Path:
    """A repository-relative path that stays inside the worktree, or InputError."""
    p = Path(path)
    if not path or p.is_absolute() or ".." in p.parts:
        raise InputError(f"path {path!r} must be relative to the worktree {wt} and stay inside it")
    return wt / p


class WorktreeChanges(RepoBase):
    """What `gitops.Repo` does inside a worktree."""

    def head_of(self, wt: Path) -> str:
        return run_git(
            Path(wt), ["rev-parse", "HEAD"], f"could not read HEAD of the worktree {wt}"
        ).stdout.strip()

    def status_paths(self, wt: Path) -> list[str]:
        """Every modified, added, deleted or untracked file (each untracked file listed), sorted.

        Renames are reported as their two paths; anything under `.flow/` is left out.
        """
        out = run_git(
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
        return sorted(set(not_flow([entry[3:] for entry in split_z(out) if entry[3:] not in copied])))

    def is_dirty(self, wt: Path) -> bool:
        return bool(self.status_paths(wt))

    def commit_all(self, wt: Path, message: str) -> str | None:
        """Commit every change in `wt` (untracked files included); None when there was nothing."""
        wt = self._owned_worktree(wt, "commit")
        what = f"could not commit in the worktree {wt}"
        self._stage_checked(wt, what)
        proc = run_git(
            wt,
            [*self._commit_args(), "commit", "-q", "--no-verify", "-m", message],
            what,
            ok_codes=range(256),
        )
        if proc.returncode != 0:
            # The last: only unstaged `.flow/` or bootstrapped changes are left (`stage_all`).
            nothing = ("nothing to commit", "nothing added to commit", "no changes added to commit")
            if any(said in proc.stdout for said in nothing):
                return None
            raise GitError(f"{what}: {git_reason(proc)}", detail=proc.stderr + proc.stdout)
        return self.head_of(wt)

    def _stage_checked(self, wt: Path, what: str) -> None:
        """Stage every change of `wt` (`stage_all`), the new objects (its files' blobs, the trees)
        made in a store of flowd's own and taken into the repository's as a lane's objects are,
        checked (docs/sandbox.md "The quarantine"): what a lane wrote reaches the store only
        through that check, also when flowd's own git hashes it. The staging is done in a copy of
        the index, put in place (under git's own `index.lock`) only once its objects are in: a
        refusal, or flowd killed half-way, leaves the index naming nothing the store lacks."""
        index = self._index_of(wt, what)
        with (
            leftovers.folder("flowd-index-") as tmp,
            scratch(self.common_dir) as (store, env),
        ):
            staged = Path(tmp) / "index"
            _copy_index(index, staged, what)
            env = {**env, "GIT_INDEX_FILE": str(staged)}
            stage_all(wt, what, env)
            run_git(wt, ["write-tree"], what, env=env)
            try:
                take_in_scratch(self.common_dir, store)
            except Refused as exc:
                raise GitError(
                    f"{what}: flowd refused what the worktree holds ({exc}); docs/sandbox.md"
                ) from exc
            _install_index(staged, index, what)

    def _index_of(self, wt: Path, what: str) -> Path:
        """The worktree's index where flowd pins its git dir (no `git rev-parse` process for it)."""
        admin = private_git_dir(wt)
        if admin is not None and admin.is_dir():
            return admin / "index"
        out = run_git(wt, ["rev-parse", "--path-format=absolute", "--git-path", "index"], what)
        return Path(out.stdout.strip())

    def commit_remaining(self, wt: Path, message: str) -> str | None:
        """`commit_all` where the worktree is usually clean already (after a task's own commit):
        one `git status` finds nothing and nothing more runs, where `commit_all` always runs
        `add`, `reset` and `commit` (docs/performance.md "Between the turns")."""
        if not self.status_paths(wt):
            return None
        return self.commit_all(wt, message)

    def changed_files(self, wt: Path, base: str, env: dict[str, str] | None = None) -> list[str]:
        """Files differing from the merge-base of `base` and HEAD: committed, uncommitted and untracked.

        Repository-relative, sorted, deletions included, renames as both paths, `.flow/` left out.
        `env` is added to git's (a lane's quarantine as an alternate, flowd/vcs/quarantine.py).
        """
        wt = Path(wt)
        what = f"could not list the files changed in the worktree {wt} since {base!r}"
        tracked = run_git(
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
            env=env,
        )
        untracked = run_git(wt, ["ls-files", "-z", "--others", "--exclude-standard"], what, env=env)
        copied = bootstrapped(wt)
        return sorted(
            set(not_flow(split_z(tracked.stdout) + [p for p in split_z(untracked.stdout) if p not in copied]))
        )

    def merged_paths(self, wt: Path, commit: str) -> list[str]:
        """The files merge commit `commit` changed against its first parent (what the story it
        merged brought), repository-relative."""
        what = f"could not list the files merge commit {commit[:12]} changed"
        proc = run_git(wt, ["diff", "--name-only", "-z", "--no-renames", f"{commit}^1", commit, "--"], what)
        return split_z(proc.stdout)

    def diff(self, wt: Path, base: str) -> str:
        """The patch from the merge-base of `base` and HEAD to the files in `wt`, new files included.

        Untracked files are staged into a throwaway copy of the index, so the worktree's own index
        is left exactly as it was.
        """
        wt = Path(wt)
        what = f"could not diff the worktree {wt} against {base!r}"
        index = self._index_of(wt, what)
        with leftovers.folder("flowd-index-") as tmp:
            tmp_index = Path(tmp) / "index"
            _copy_index(index, tmp_index, what)
            # Its new blobs go to a store of flowd's own, thrown away after (docs/sandbox.md).
            with scratch(self.common_dir) as (_store, objects):
                env = {"GIT_INDEX_FILE": str(tmp_index), **objects}
                stage_all(wt, what, env)
                # No external diff and no textconv: the plain patch, and no program of a config's runs.
                args = ["diff", "--no-ext-diff", "--no-textconv", "--cached", "--merge-base", base, "--"]
                return run_git(wt, args, what, env=env).stdout

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
        proc = run_git(wt, [*args, branch], what, ok_codes=range(256))
        if proc.returncode == 0:
            self.sync_submodules(wt)
            already = "Already up to date" in proc.stdout or "Already up-to-date" in proc.stdout
            return MergeResult(ok=True, commit=self.head_of(wt), already_merged=already)
        conflicts = split_z(run_git(wt, ["diff", "--name-only", "-z", "--diff-filter=U"], what).stdout)
        in_progress = (
            run_git(wt, ["rev-parse", "-q", "--verify", "MERGE_HEAD"], what, ok_codes=(0, 1)).returncode == 0
        )
        if in_progress or conflicts:
            run_git(wt, ["merge", "--abort"], f"could not abort the conflicted merge of {branch!r} in {wt}")
        if conflicts:
            return MergeResult(ok=False, commit=self.head_of(wt), conflicts=sorted(set(conflicts)))
        raise GitError(f"{what}: {git_reason(proc)}", detail=proc.stderr + proc.stdout)

    def refresh_index(self, wt: Path) -> None:
        """Record in `wt`'s index the stat of each file whose content matches it (`git update-index
        --refresh`, which writes the index), so later scans that may not write it trust the stat
        instead of reading the file again. Only where no one else runs git at that moment."""
        wt = self._owned_worktree(wt, "refresh the index of")
        run_git(
            wt, ["update-index", "-q", "--refresh"], f"could not refresh the index of {wt}", ok_codes=(0, 1)
        )

    def clear_stale_locks(self, wt: Path) -> list[Path]:
        """Remove the locks a git killed mid-command left for `wt`: its `index.lock`, its
        `HEAD.lock` and its branch's ref lock (a kill inside `git commit` leaves the last two, and
        every later commit failed "cannot lock ref 'HEAD'"); the ones there were.

        Only for flowd's own worktrees, and only while holding the epic lock: then no flowd process
        is running git there, and a lock is what a killed run left behind.
        """
        wt = self._owned_worktree(wt, "clear the locks of")
        out = run_git(
            wt,
            ["rev-parse", "--path-format=absolute", "--git-path", "index.lock", "--git-path", "HEAD.lock",
             "--symbolic-full-name", "HEAD"],
            f"could not find the git files of the worktree {wt}",
        ).stdout.split("\n")  # fmt: skip
        locks = [Path(out[0]), Path(out[1])]
        if out[2].startswith("refs/heads/") and ".." not in out[2].split("/"):
            locks.append(self.common_dir / f"{out[2]}.lock")
        removed = []
        for lock in locks:
            try:
                lock.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise GitError(f"could not remove the stale lock {lock}: {exc.strerror or exc}") from exc
            removed.append(lock)
        return removed

    def subjects_since(self, wt: Path, base: str) -> set[str]:
        """Subjects of the commits `wt`'s branch has beyond `base` (empty when git cannot say)."""
        proc = run_git(Path(wt), ["log", "--format=%s", f"{base}..HEAD", "--"], "", ok_codes=range(256))
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
            run_git(wt, ["merge", "--abort"], what)
        run_git(wt, ["checkout", "-q", "--detach", "-f", commit], what)
        run_git(wt, ["clean", "-fdxq"], what)
        self.sync_submodules(wt)

    def detach(self, wt: Path) -> None:
        """Let go of `wt`'s branch (HEAD points at its commit instead): no file, index or merge
        state is touched, so it works whatever state a killed run left the worktree in."""
        wt = self._owned_worktree(wt, "detach")
        what = f"could not detach the worktree {wt} from its branch"
        head = run_git(wt, ["rev-parse", "--verify", "-q", "HEAD"], what, ok_codes=(0, 1)).stdout.strip()
        if head:
            run_git(wt, ["update-ref", "--no-deref", "-m", "flowd: spare worktree", "HEAD", head], what)

    def reset_worktree(self, wt: Path, branch: str | None, start: str, keep: Sequence[str] = ()) -> None:
        """Make a used worktree exactly what a new `git worktree add -b branch wt start` gives:
        `branch` (re)made at `start` and checked out, every other file removed, ignored ones too
        (but the repository-relative `keep`), submodules at the commits `start` records with
        nothing of their own left. Only what differs from the previous checkout is written.
        `start` may be `branch` itself (an existing branch checked out as it is); no `branch`:
        `start` checked out detached, as `git worktree add --detach wt start` gives."""
        wt = self._owned_worktree(wt, "reset")
        what = f"could not reset the worktree {wt} to {branch or 'a detached HEAD'!r} at {start!r}"
        self.clear_stale_locks(wt)
        args = ["checkout", "-q", "-f", "--no-recurse-submodules"]
        if branch is None:
            args += ["--detach", start]
        else:
            args += [branch] if start == branch else ["-B", branch, start]
        with self._lock:  # the branch ref is shared bookkeeping
            run_git(wt, args, what)
        # `checkout` clears MERGE_HEAD and friends; anything a previous use left in the index
        # beyond the commit (an unmerged entry) is gone with `-f`. A kept copy must still be
        # ignored by the new branch's rules, or a later `git add -A` would commit it.
        kept = sorted(self.ignored_among(wt, keep)) if keep else []
        scrub(wt, what, kept)
        write_bootstrapped(wt, kept)
        self.sync_submodules(wt)

    def fast_forward(self, wt: Path, commit: str) -> None:
        """Move the worktree and its branch forward to `commit`, a descendant of its HEAD; refuses
        (GitError) when it is not one: the branch moved since `commit` was built on it."""
        wt = self._owned_worktree(wt, "fast-forward")
        run_git(
            wt,
            ["merge", "--ff-only", "-q", "--no-verify", commit],
            f"could not fast-forward the worktree {wt} to {commit[:10]}",
        )
        self.sync_submodules(wt)

    def reset_hard(self, wt: Path, commit: str) -> None:
        """Roll the worktree and its branch back to `commit`; untracked files are kept."""
        wt = self._owned_worktree(wt, "reset")
        run_git(wt, ["reset", "--hard", "-q", commit], f"could not roll the worktree {wt} back to {commit}")
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
        full = {p.rstrip("/"): check_rel(wt, p) for p in paths}
        what = f"could not restore {len(full)} path(s) in the worktree {wt} from {from_ref!r}"
        listed = run_git(wt, ["ls-tree", "-z", from_ref, "--", *full], what).stdout
        modes = {entry.partition("\t")[2]: entry.split(" ", 1)[0] for entry in split_z(listed)}
        present = [p for p in full if p in modes]
        # A submodule `from_ref` has is only pointed back (checkout, then sync): `git rm` of it
        # would also drop its entry from `.gitmodules`, a change of its own.
        removed = {p: target for p, target in full.items() if modes.get(p) != "160000"}
        if removed:
            run_git(wt, ["rm", "-r", "-f", "-q", "--ignore-unmatch", "--", *removed], what)
        for target in removed.values():
            try:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
            except OSError as exc:
                raise GitError(f"{what}: {target} could not be deleted ({exc.strerror or exc})") from exc
        if present:
            run_git(wt, ["checkout", from_ref, "--", *present], what)
        self.sync_submodules(wt)


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


def _install_index(staged: Path, index: Path, what: str) -> None:
    """`staged` as the worktree's index, as git writes one (flowd/vcs/index_reset.py `Lock`),
    with the time it was made (git's racy-clean check reads it against the files')."""
    lock = index.with_name(index.name + ".lock")
    try:
        with index_reset.Lock(index) as held:
            held.install(staged.read_bytes(), os.stat(staged).st_mtime_ns)
    except FileExistsError as exc:
        raise GitError(f"{what}: Unable to create '{lock}': File exists.") from exc
    except OSError as exc:
        raise GitError(f"{what}: could not write the index {index} ({exc.strerror})") from exc


def _copy_index(index: Path, copy: Path, what: str) -> None:
    """A copy of the index `index`, none when it has none, with its times: git reads an entry
    whose file changed in the second the index was written as racily clean, and compares the
    file's bytes, knowing that second from the index file's own time; a copy made later hid a
    same-size edit from it (with `core.trustctime` off, or where times tick coarsely) and the
    commit left the edit out. Read as data: the admin dir is the lane's to write (docs/sandbox.md
    "flowd's own git"), and an index it replaced with a link is not read through."""
    try:
        handle = open_regular(index)
    except FileNotFoundError:
        return
    except OSError as exc:
        handle = None
        if exc.errno != errno.ELOOP:
            raise GitError(f"{what}: could not read the index {index} ({exc.strerror})") from exc
    if handle is None:
        raise GitError(f"{what}: the index {index} is not a regular file (a link or a FIFO in its place)")
    with handle:
        st = os.fstat(handle.fileno())
        copy.write_bytes(handle.read())
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
