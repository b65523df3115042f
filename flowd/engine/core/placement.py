"""The placement rules of lanes run elsewhere (docs/scale-out.md): where a lane goes, and what a
lost lane becomes. Plain values in, a decision out; `engine/lanes/ray_lanes.py` carries it out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A lane lost this many times (its worker or node died each time) fails instead of looping.
MAX_PLACEMENTS = 3


@dataclass(frozen=True)
class PlaceAgain:
    attempt: int  # the number of the next placement


@dataclass(frozen=True)
class GiveUp:
    reason: str


def after_lost(placements: int, why: str, limit: int = MAX_PLACEMENTS) -> PlaceAgain | GiveUp:
    """A lane placed `placements` times was lost (`why`): place it again, or fail the story."""
    if placements < limit:
        return PlaceAgain(placements + 1)
    return GiveUp(f"its lane was lost {placements} times, last: {why}")


def least_loaded(load: Mapping[str, int], nodes: list[str]) -> str | None:
    """The node with the fewest lanes placed now (ties: the smallest id, so placement is stable)."""
    if not nodes:
        return None
    return min(nodes, key=lambda node: (load.get(node, 0), node))
