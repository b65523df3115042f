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
class PlacementsSpent:
    reason: str


def after_lost(placements: int, why: str, limit: int = MAX_PLACEMENTS) -> PlaceAgain | PlacementsSpent:
    """A lane placed `placements` times was lost (`why`): place it again, or fail the story."""
    if placements < limit:
        return PlaceAgain(placements + 1)
    return PlacementsSpent(f"its lane was lost {placements} times, last: {why}")


def least_loaded(load: Mapping[str, int], nodes: list[str]) -> str | None:
    """The node with the fewest lanes placed now (ties: the smallest id, so placement is stable)."""
    if not nodes:
        return None
    return min(nodes, key=lambda node: (load.get(node, 0), node))


# A node whose lane was lost gets no new lane for this long while another node can take it: a dead
# node stays "alive" in Ray's view until its health checks time out.
LOST_NODE_S = 60.0


@dataclass(frozen=True)
class Node:
    id: str
    cpus: float


def lane_nodes(nodes: list[Node]) -> list[str]:
    """The live nodes lanes may go to: those offering CPUs (a head started with `--num-cpus 0`, as
    Ray advises for a big cluster, gets none), or every live node when none offers any."""
    working = [n for n in nodes if n.cpus > 0]
    return sorted(n.id for n in (working or nodes))


def trusted(
    nodes: list[str], lost_at: Mapping[str, float], now: float, window: float = LOST_NODE_S
) -> list[str]:
    """`nodes` without those that lost a lane in the last `window` seconds, unless that leaves none."""
    kept = [n for n in nodes if n not in lost_at or now - lost_at[n] >= window]
    return kept or list(nodes)
