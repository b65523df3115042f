"""The port rule: each running lane gets its own slot, a range of ports (docs/worktree-bootstrap.md).

A lane holds a slot from the moment its worktree is prepared until its story task ends (merged,
failed, waiting or cancelled); the lowest slot nobody holds is taken, so slots are reused as
lanes end. Slot `n` is the ports `portBase + portsPerLane*n` to
`portBase + portsPerLane*(n+1) - 1`. A parallel task beside its story's coder holds a slot of its
own (key `<story>#t<index>`): its gates run at the same time as the story's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HIGHEST_PORT = 65535


@dataclass(frozen=True)
class SlotPorts:
    """A slot's port range and the variables the lane's setup, gates and agent see."""

    lane: str  # the story id (FLOWD_LANE), also for a parallel task's range
    slot: int
    first: int
    last: int

    @property
    def ports(self) -> str:
        return f"{self.first}-{self.last}"

    def env(self) -> dict[str, str]:
        return {"FLOWD_LANE": self.lane, "FLOWD_PORT": str(self.first), "FLOWD_PORTS": self.ports}


def lowest_free_slot(held: Iterable[int]) -> int:
    """The smallest slot number (0, 1, …) nobody holds."""
    taken = set(held)
    slot = 0
    while slot in taken:
        slot += 1
    return slot


def port_range(lane: str, slot: int, base: int, per_slot: int) -> SlotPorts:
    first = base + per_slot * slot
    return SlotPorts(lane=lane, slot=slot, first=first, last=first + per_slot - 1)


def ceiling_problem(base: int, per_slot: int, slots: int) -> str | None:
    """Why `slots` slots held at once cannot all get a range under port 65535 (None: they can)."""
    last = base + per_slot * slots - 1
    if last <= HIGHEST_PORT:
        return None
    return (
        f"{slots} lane(s) of {per_slot} port(s) from {base} would need ports up to {last}, "
        f"past {HIGHEST_PORT}"
    )


class PortSlots:
    """Which key (a story, or a parallel task) holds which slot; `take` and `release` change it."""

    def __init__(self, base: int, per_slot: int) -> None:
        self.base = base
        self.per_slot = per_slot
        self._held: dict[str, SlotPorts] = {}

    def take(self, key: str, lane: str) -> SlotPorts:
        """The range `key` holds, taking the lowest free slot when it holds none."""
        if key in self._held:
            return self._held[key]
        slot = lowest_free_slot(p.slot for p in self._held.values())
        ports = port_range(lane, slot, self.base, self.per_slot)
        self._held[key] = ports
        return ports

    def release(self, key: str) -> None:
        """The holder ended: its slot is free for the next one (a key holding nothing is no error)."""
        self._held.pop(key, None)

    def held(self, key: str) -> SlotPorts | None:
        return self._held.get(key)

    @property
    def slots(self) -> dict[str, int]:
        return {key: ports.slot for key, ports in self._held.items()}
