"""The rule for big repositories (flowd/engine/core/bigrepo.py, docs/repositories.md "Big
repositories"): what a run does when the user set nothing, by the checkout's size; the user's
settings always win."""

from __future__ import annotations

import pytest

from flowd.engine.core.bigrepo import BIG_FILES, Asked, CheckoutSize, choose, spares_within

MB = 1_000_000
BIG = CheckoutSize(25_000, 100 * MB)
SMALL = CheckoutSize(BIG_FILES - 1, 0)


@pytest.mark.parametrize(
    ("size", "asked", "keep", "sparse", "auto_sparse", "said"),
    [
        # small, or unreadable: nothing chosen, nothing said
        (SMALL, Asked(None, None), 0, False, False, None),
        (None, Asked(None, None), 0, False, False, None),
        (SMALL, Asked(2, True), 2, True, False, None),
        # big, nothing set: the lanes and the train's candidate (concurrency + 1), sparse
        (BIG, Asked(None, None), 4, True, True, "keeping up to 4 spare worktrees between runs (about 400 MB"),
        (CheckoutSize(BIG_FILES, 10 * MB), Asked(None, None, concurrency=8), 9, True, True, "up to 9 spare"),
        # the budget limits them
        (BIG, Asked(None, None, budget_mb=250), 2, True, True, "spareDiskBudgetMb = 250"),
        (BIG, Asked(None, None, budget_mb=99), 0, True, True, "keeping no spare worktree"),
        # the user's settings win, 0 and false included; only what was chosen is said
        (BIG, Asked(0, None), 0, True, True, "checking out only each story's perimeter folders"),
        (BIG, Asked(None, False), 4, False, False, "keeping up to 4"),
        (BIG, Asked(0, False), 0, False, False, None),
        (BIG, Asked(7, True), 7, True, False, None),
        # whole story worktrees where sparse ones cannot be
        (
            BIG,
            Asked(None, None, cluster=True),
            4,
            False,
            False,
            "whole story worktrees (its lanes run on a Ray cluster)",
        ),
        (BIG, Asked(None, None, sparse_index=False), 4, False, False, "git is older than 2.32"),
    ],
)
def test_the_choice(
    size: CheckoutSize | None, asked: Asked, keep: int, sparse: bool, auto_sparse: bool, said: str | None
) -> None:
    chosen = choose(size, asked)
    assert (chosen.keep_spares, chosen.sparse, chosen.auto_sparse) == (keep, sparse, auto_sparse)
    if said is None:
        assert chosen.said is None
    else:
        assert chosen.said is not None and said in chosen.said, chosen.said
        assert chosen.said.startswith("big repository (")


def test_a_chosen_setting_is_said_and_a_set_one_is_not() -> None:
    said = choose(BIG, Asked(None, True)).said
    assert said is not None and "sparse" not in said and "spare worktrees" in said
    said = choose(BIG, Asked(3, None)).said
    assert said is not None and "spare" not in said.replace("sparse", "")


@pytest.mark.parametrize(
    ("budget_mb", "disk", "wanted", "fits"),
    [(2048, 100 * MB, 4, 4), (250, 100 * MB, 4, 2), (0, 100 * MB, 4, 0), (10, 0, 4, 4), (1, 2 * MB, 3, 0)],
)
def test_spares_within_the_budget(budget_mb: int, disk: int, wanted: int, fits: int) -> None:
    assert spares_within(budget_mb, disk, wanted) == fits
