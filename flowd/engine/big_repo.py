"""What a run does about worktrees when the user set nothing (docs/repositories.md "Big
repositories"): the checkout's size read from its index (flowd/vcs/index_size.py), the rule
applied (flowd/engine/core/bigrepo.py), and the settings the run then works with.
"""

from __future__ import annotations

import re

from flowd.base.errors import FlowdError
from flowd.engine.core.bigrepo import Asked, CheckoutSize, Chosen, choose, is_big
from flowd.store.config import Settings
from flowd.vcs.gitcli import run_git
from flowd.vcs.gitops import Repo
from flowd.vcs.index_size import checkout_disk_bytes, index_entries


def checkout_size(repo: Repo) -> CheckoutSize | None:
    """The user's checkout's size: its index's entry count, and for a big one the disk a whole
    checkout takes. None when the index cannot be read."""
    files = index_entries(repo.git_dir)
    if files is None:
        return None
    if not is_big(files):
        return CheckoutSize(files, 0)
    disk = checkout_disk_bytes(repo.git_dir, repo.common_dir)
    return None if disk is None else CheckoutSize(files, disk)


def _git_has_sparse_index(repo: Repo) -> bool:
    try:
        out = run_git(repo.root, ["version"], "could not run git version").stdout
    except FlowdError:
        return False
    found = re.search(r"(\d+)\.(\d+)", out)
    return found is not None and (int(found[1]), int(found[2])) >= (2, 32)


def worktree_choice(repo: Repo, settings: Settings, concurrency: int) -> Chosen:
    """The run's `keepSpares` and `sparse`: the user's where `.flow/config.toml` sets them, else
    chosen from the checkout's size."""
    worktree = settings.worktree
    given = worktree.model_fields_set
    keep = worktree.keep_spares if "keep_spares" in given else None
    sparse = worktree.sparse if "sparse" in given else None
    if keep is not None and sparse is not None:
        return Chosen(keep, sparse)
    size = checkout_size(repo)
    big = size is not None and is_big(size.files)
    asked = Asked(
        keep_spares=keep,
        sparse=sparse,
        budget_mb=worktree.spare_disk_budget_mb,
        concurrency=concurrency,
        cluster=settings.lanes.engine == "ray",
        sparse_index=big and sparse is None and _git_has_sparse_index(repo),
    )
    return choose(size, asked)


def with_choice(settings: Settings, chosen: Chosen) -> Settings:
    """`settings` with the chosen `keepSpares` and `sparse` (the user's own where set)."""
    worktree = settings.worktree
    if (worktree.keep_spares, worktree.sparse) == (chosen.keep_spares, chosen.sparse):
        return settings
    update = {"keep_spares": chosen.keep_spares, "sparse": chosen.sparse}
    return settings.model_copy(update={"worktree": worktree.model_copy(update=update)})
