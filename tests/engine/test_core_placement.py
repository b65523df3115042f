"""The placement rules as tables: losses and loads → a decision; no cluster, no git."""

from __future__ import annotations

import pytest

from flowd.engine.core.placement import GiveUp, PlaceAgain, after_lost, least_loaded


@pytest.mark.parametrize(
    ("placements", "limit", "expected"),
    [
        (1, 3, PlaceAgain(2)),
        (2, 3, PlaceAgain(3)),
        (3, 3, GiveUp("its lane was lost 3 times, last: worker died")),
        (1, 1, GiveUp("its lane was lost 1 times, last: worker died")),
    ],
)
def test_after_lost(placements: int, limit: int, expected: PlaceAgain | GiveUp) -> None:
    assert after_lost(placements, "worker died", limit) == expected


@pytest.mark.parametrize(
    ("load", "nodes", "expected"),
    [
        ({}, [], None),
        ({}, ["b", "a"], "a"),  # ties: the smallest id
        ({"a": 2, "b": 1}, ["a", "b"], "b"),
        ({"a": 1, "b": 1, "c": 0}, ["a", "b", "c"], "c"),
        ({"gone": 0, "a": 3}, ["a"], "a"),  # only live nodes count
    ],
)
def test_least_loaded(load: dict[str, int], nodes: list[str], expected: str | None) -> None:
    assert least_loaded(load, nodes) == expected
