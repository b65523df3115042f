"""Sparse worktrees (docs/repositories.md "Sparse worktrees"): a story's worktree that checks out
only the folders its perimeter names, through git's own cone-mode sparse checkout.

git keeps a worktree's sparse settings in its own `config.worktree` (git's per-worktree config,
`extensions.worktreeConfig`), so the user's checkout and the other worktrees stay whole, and
every git command run in the worktree (flowd's, the agent's, the user's) keeps to the cone. Which
folders: `flowd/plan/cone.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flowd.vcs.gitcli import GitDirChanged, pin_of, run_git, split_z
from flowd.vcs.gitops import Repo
from flowd.vcs.index_size import index_entries
from flowd.vcs.worktrees import ADD

SPARSE_INDEX_FROM = 200_000  # files: where a sparse index starts to pay (`_index_kind`)


def enable_worktree_config(repo: Repo) -> bool:
    """Turn on git's per-worktree config in the repository, once: `git sparse-checkout` would do
    it at the first sparse worktree, in the middle of the run, where detection would take the
    change of the shared `config` for a lane's. Returns whether it changed anything."""
    got = run_git(repo.root, ["config", "--bool", "--get", "extensions.worktreeConfig"], "", ok_codes=(0, 1))
    if got.stdout.strip() == "true":
        return False
    run_git(
        repo.root,
        ["config", "extensions.worktreeConfig", "true"],
        f"could not turn on git's per-worktree config in {repo.root} (sparse worktrees need it)",
    )
    return True


def kinds_at(repo: Repo, commit: str, paths: Sequence[str]) -> dict[str, bool]:
    """Which of `paths` exist at `commit`, each mapped to whether it is a folder (a tree or a
    submodule). One `git ls-tree` for all of them."""
    if not paths:
        return {}
    out = run_git(
        repo.root,
        ["ls-tree", "-z", "--full-tree", commit, "--", *paths],
        f"could not list {len(paths)} perimeter paths at {commit}",
    ).stdout
    kinds: dict[str, bool] = {}
    for line in split_z(out):
        meta, _, name = line.partition("\t")
        if name:
            kinds[name] = meta.split(" ")[1] != "blob"
    return kinds


def is_sparse(wt: Path) -> bool:
    got = run_git(Path(wt), ["config", "--bool", "--get", "core.sparseCheckout"], "", ok_codes=(0, 1))
    return got.stdout.strip() == "true"


def apply_cone(wt: Path, dirs: Sequence[str] | None) -> None:
    """Check out only `dirs` (and the files at the root) in the worktree `wt`, or, with None, all
    of it again. Only what differs is written or removed."""
    wt = Path(wt)
    if dirs is None:
        if is_sparse(wt):
            run_git(wt, ["sparse-checkout", "disable"], f"could not check the whole tree out in {wt}")
        return
    run_git(
        wt,
        ["sparse-checkout", "set", "--cone", _index_kind(wt), "--", *dirs],
        f"could not make {wt} a sparse checkout of {', '.join(dirs) or 'the root files'}",
    )


def _index_kind(wt: Path) -> str:
    """A sparse index (each folder outside the cone one entry) only for a repository of
    `SPARSE_INDEX_FROM` files or more: below that the whole index, the files outside the cone
    marked skip-worktree, is the quicker one. git's `status`, `diff` and `write-tree` on a
    sparse index read the tree of every folder outside the cone, each through its delta chain;
    on the 25,000-file benchmark repository 40-55 ms a command against 4-6 ms with the whole
    index (docs/repositories.md "Sparse worktrees"), about 0.2 µs an entry: the two meet near
    200,000 files."""
    try:
        pin = pin_of(wt)
    except GitDirChanged:
        pin = None
    files = index_entries(pin.common_dir) if pin is not None else None
    return "--no-sparse-index" if files is not None and files < SPARSE_INDEX_FROM else "--sparse-index"


def add_sparse(repo: Repo, path: Path, branch: str, start: str | None, dirs: Sequence[str]) -> Path:
    """A worktree at `path` on `branch` (made at `start` when given) with only `dirs` and the
    root files checked out: no file outside them is ever written."""
    path = Path(path).absolute()
    args = [*ADD, "-q", "--no-checkout"]  # none of your own sparse patterns copied: its own follow
    args += ["-b", branch, str(path), start] if start is not None else [str(path), branch]
    with repo._lock:  # the branch ref and git's worktree records are shared bookkeeping
        run_git(repo.root, args, f"could not add the worktree {path} on {branch}")
    apply_cone(path, dirs)
    # The index is still empty: fill it from HEAD, writing only the cone's files.
    run_git(path, ["reset", "-q", "--hard"], f"could not check {branch} out in {path}")
    repo.sync_submodules(path)
    return path
