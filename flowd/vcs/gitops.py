"""Git for the engine: branches, worktrees, commits, merges, rollback, restore and diffs.

Every function blocks (the engine calls them in worker threads) and every failure is a
`GitError` (a FlowdError) whose message is one sentence naming the repository, worktree or
branch involved, never a raw git exception.

The parts: running git (`gitcli.py`), the repository-wide `RepoBase` (`repo.py`: refs, branches,
identity, ignore rules), work inside a worktree (`changes.py`), worktree bookkeeping
(`worktrees.py`), submodules (`submodules.py`) and bootstrapped files (`bootstrapped.py`).
GitPython is used only to discover the repository, where its parent-directory search and error
types are what we want.

Nothing here ever runs a mutating command in the user's own checkout (`Repo.root`): story and
epic work happens in linked worktrees outside the repository, and the guard `_owned_worktree`
refuses a mutation aimed at the user's checkout.
"""

from __future__ import annotations

from pathlib import Path

from flowd.base import layout
from flowd.base.errors import InputError
from flowd.base.layout import as_shared
from flowd.vcs.gitcli import run_git
from flowd.vcs.worktrees import Worktrees

# `flowd/server/watch.py` asks this of a worktree's files, with no `Repo`.
__all__ = ["Repo", "init_repo", "worktree_default_root", "worktree_root"]


class Repo(Worktrees):
    """The user's repository: the checkout flowd was started in, and its shared git dir."""

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
            # Asked of git itself: GitPython reads object names as SHA-1 only, and calls a
            # SHA-256 repository's HEAD invalid (docs/repositories.md "Object formats").
            head = run_git(
                Path(grepo.working_tree_dir),
                ["rev-parse", "--verify", "-q", "HEAD^{commit}"],
                f"could not read HEAD in {grepo.working_tree_dir}",
                ok_codes=range(256),
            )
            if head.returncode != 0:
                raise InputError(
                    f"the git repository at {grepo.working_tree_dir} has no commits yet; "
                    "make a first commit and try again"
                )
            git_dir, common_dir = as_shared(Path(grepo.git_dir), Path(grepo.common_dir))
            return cls(Path(grepo.working_tree_dir), git_dir, common_dir)
        finally:
            grepo.close()


def init_repo(path: Path, message: str, branch: str = "main") -> Repo:
    """A repository flowd itself creates (the demo's sample) in the existing directory `path`, on
    `branch`, with every file already there committed: never the user's checkout."""
    path = Path(path)
    what = f"could not create a git repository in {path}"
    run_git(path, ["init", "-q", "-b", branch], what)
    repo = Repo(path)
    run_git(path, ["add", "-A"], what)
    run_git(path, [*repo._commit_args(), "commit", "-q", "--no-verify", "-m", message], what)
    return repo


def worktree_default_root(repo: Repo) -> Path:
    """`<repo>/../<repoName>.flowd`: beside the repository, so agents never wander into it."""
    return layout.default_worktree_root(repo.root)


def worktree_root(repo: Repo, configured: str | None) -> Path:
    """The worktree root: `worktreeRoot` from config.toml (relative to the repository) or the default."""
    if not configured:
        return worktree_default_root(repo)
    return (repo.root / Path(configured).expanduser()).resolve()
