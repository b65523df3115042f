"""Big repositories fast by default (docs/repositories.md "Big repositories"): from the size of
the user's checkout, what a run does about worktrees when the user set nothing.

A checkout of a big repository is mostly file-system work (25,000 files written, then deleted),
so where `[worktree] keepSpares` and `[worktree] sparse` are not set and the checkout has at least
`BIG_FILES` files, the run keeps spare worktrees between runs (as many as the lanes and the merge
train's candidate use, no more than `[worktree] spareDiskBudgetMb` holds) and checks out only each
story's perimeter folders (sparse worktrees), unless its lanes run on a Ray cluster or git is too
old for a sparse index. A setting the user wrote always wins, `keepSpares = 0` and
`sparse = false` included. Pure: the sizes come in measured (flowd/vcs/index_size.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# Files in the checkout from which a run chooses for itself. A whole checkout of 10,000 small
# files took 0.3-0.8 s on the 2-core benchmark machine (25,000: 0.7-2.0 s, more beside the
# lanes): past this, a run's four or five whole checkouts are most of a short epic's time
# (docs/performance.md "A big monorepo").
BIG_FILES = 10_000
# `[worktree] spareDiskBudgetMb`'s default: disk the spares kept between runs may take.
SPARE_DISK_BUDGET_MB = 2048
MB = 1_000_000
# How the run's sentence about its choice begins (`flowd run` prints it among its first lines).
SAID_PREFIX = "big repository ("


@dataclass(frozen=True)
class CheckoutSize:
    """The user's checkout as its index records it: tracked files, and the disk one whole
    checkout of them takes (each file's size rounded up to the file system's block)."""

    files: int
    disk_bytes: int


@dataclass(frozen=True)
class Asked:
    """What the run was given: the user's settings (None: not set) and its circumstances."""

    keep_spares: int | None
    sparse: bool | None
    budget_mb: int = SPARE_DISK_BUDGET_MB
    concurrency: int = 3
    cluster: bool = False  # lanes on a Ray cluster: whole worktrees there (docs/scale-out.md)
    sparse_index: bool = True  # git has `--sparse-index` (2.32 or later)


@dataclass(frozen=True)
class Chosen:
    """What the run does, and the one sentence it says at its start (None: nothing chosen)."""

    keep_spares: int
    sparse: bool
    said: str | None = None
    auto_sparse: bool = False  # sparse chosen here (a red gate makes the lane whole)


def is_big(files: int) -> bool:
    return files >= BIG_FILES


def spares_within(budget_mb: int, disk_bytes: int, wanted: int) -> int:
    """How many whole checkouts of `disk_bytes` fit in `budget_mb`, at most `wanted`."""
    if disk_bytes <= 0:
        return wanted
    return max(0, min(wanted, budget_mb * MB // disk_bytes))


def choose(size: CheckoutSize | None, asked: Asked) -> Chosen:
    """The run's worktree settings: the user's where set, else this rule's for a big checkout."""
    big = size is not None and is_big(size.files)
    keep = asked.keep_spares
    if keep is None:
        keep = spares_within(asked.budget_mb, size.disk_bytes, asked.concurrency + 1) if big and size else 0
    sparse = asked.sparse
    if sparse is None:
        sparse = big and not asked.cluster and asked.sparse_index
    if not big or size is None or (asked.keep_spares is not None and asked.sparse is not None):
        return Chosen(keep, sparse)
    return Chosen(keep, sparse, _said(size, asked, keep, sparse), asked.sparse is None and sparse)


def _said(size: CheckoutSize, asked: Asked, keep: int, sparse: bool) -> str:
    parts: list[str] = []
    if asked.keep_spares is None:
        checkout_mb = size.disk_bytes / MB
        budget = f"[worktree] spareDiskBudgetMb = {asked.budget_mb}"
        if keep:
            parts.append(
                f"keeping up to {keep} spare worktrees between runs "
                f"(about {keep * checkout_mb:,.0f} MB of disk; {budget})"
            )
        else:
            parts.append(
                f"keeping no spare worktree between runs (one is {checkout_mb:,.0f} MB, over {budget})"
            )
    if asked.sparse is None:
        if sparse:
            parts.append("checking out only each story's perimeter folders ([worktree] sparse)")
        else:
            why = "its lanes run on a Ray cluster" if asked.cluster else "git is older than 2.32"
            parts.append(f"whole story worktrees ({why})")
    return (
        f"{SAID_PREFIX}{size.files:,} files, about {size.disk_bytes / MB:,.0f} MB a checkout): "
        + " and ".join(parts)
        + '; set these in .flow/config.toml to choose yourself (docs/repositories.md "Big repositories")'
    )
