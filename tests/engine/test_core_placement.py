"""The placement rules as tables: losses and loads → a decision; no cluster, no git."""

from __future__ import annotations

import pytest

from flowd.engine.core.placement import (
    Node,
    PlaceAgain,
    PlacementsSpent,
    after_lost,
    lane_nodes,
    least_loaded,
    trusted,
)


@pytest.mark.parametrize(
    ("placements", "limit", "expected"),
    [
        (1, 3, PlaceAgain(2)),
        (2, 3, PlaceAgain(3)),
        (3, 3, PlacementsSpent("its lane was lost 3 times, last: worker died")),
        (1, 1, PlacementsSpent("its lane was lost 1 times, last: worker died")),
    ],
)
def test_after_lost(placements: int, limit: int, expected: PlaceAgain | PlacementsSpent) -> None:
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


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([], []),
        ([Node("head", 0), Node("b", 2), Node("a", 4)], ["a", "b"]),  # a head without CPUs gets no lanes
        ([Node("head", 0)], ["head"]),  # unless no node offers CPUs
    ],
)
def test_lane_nodes(nodes: list[Node], expected: list[str]) -> None:
    assert lane_nodes(nodes) == expected


@pytest.mark.parametrize(
    ("lost_at", "now", "expected"),
    [
        ({}, 100.0, ["a", "b"]),
        ({"a": 90.0}, 100.0, ["b"]),  # lost a lane 10 s ago: left alone while b can take lanes
        ({"a": 30.0}, 100.0, ["a", "b"]),  # 70 s ago: trusted again
        ({"a": 90.0, "b": 95.0}, 100.0, ["a", "b"]),  # both lost lanes: better than no node
    ],
)
def test_trusted(lost_at: dict[str, float], now: float, expected: list[str]) -> None:
    assert trusted(["a", "b"], lost_at, now, window=60.0) == expected
