"""The port rule as tables: lanes taking and releasing slots → their ranges; no run, no sockets."""

from __future__ import annotations

import pytest

from flowd.engine.core.ports import PortSlots, SlotPorts, ceiling_problem, lowest_free_slot, port_range


@pytest.mark.parametrize(
    ("held", "expected"),
    [
        ([], 0),
        ([0], 1),
        ([0, 1, 2], 3),
        ([1, 2], 0),  # slot 0 freed: reused first
        ([0, 2, 3], 1),
        ([5], 0),
    ],
)
def test_lowest_free_slot(held: list[int], expected: int) -> None:
    assert lowest_free_slot(held) == expected


@pytest.mark.parametrize(
    ("slot", "base", "per_slot", "first", "last", "ports"),
    [
        (0, 41000, 10, 41000, 41009, "41000-41009"),
        (1, 41000, 10, 41010, 41019, "41010-41019"),
        (7, 41000, 10, 41070, 41079, "41070-41079"),
        (2, 5000, 1, 5002, 5002, "5002-5002"),
        (3, 20000, 100, 20300, 20399, "20300-20399"),
    ],
)
def test_port_range(slot: int, base: int, per_slot: int, first: int, last: int, ports: str) -> None:
    lane = port_range("api", slot, base, per_slot)
    assert (lane.first, lane.last, lane.ports) == (first, last, ports)
    assert lane.env() == {"FLOWD_LANE": "api", "FLOWD_PORT": str(first), "FLOWD_PORTS": ports}


# Each step: ("take", key) or ("release", key); then the slots every held key has.
Step = tuple[str, str]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([("take", "a")], {"a": 0}),
        ([("take", "a"), ("take", "b"), ("take", "c")], {"a": 0, "b": 1, "c": 2}),
        ([("take", "a"), ("take", "a")], {"a": 0}),  # taking again keeps the same slot
        ([("take", "a"), ("take", "b"), ("release", "a"), ("take", "c")], {"b": 1, "c": 0}),  # reused
        ([("take", "a"), ("take", "b"), ("release", "b"), ("take", "c")], {"a": 0, "c": 1}),
        ([("release", "nobody"), ("take", "a")], {"a": 0}),  # releasing nothing is no error
        (
            [
                ("take", "a"),
                ("take", "b"),
                ("take", "c"),
                ("release", "a"),
                ("release", "c"),
                ("take", "d"),
                ("take", "e"),
            ],
            {"b": 1, "d": 0, "e": 2},
        ),
        # a parallel task is a lane of its own for ports
        ([("take", "api"), ("take", "api#t2"), ("take", "ui")], {"api": 0, "api#t2": 1, "ui": 2}),
    ],
)
def test_slots(steps: list[Step], expected: dict[str, int]) -> None:
    slots = PortSlots(41000, 10)
    for action, key in steps:
        if action == "take":
            slots.take(key, key.split("#")[0])
        else:
            slots.release(key)
    assert slots.slots == expected
    # running lanes never share a port
    ranges = [slots.held(key) for key in expected]
    ports = [p for r in ranges if r is not None for p in range(r.first, r.last + 1)]
    assert len(ports) == len(set(ports))


def test_a_parallel_task_keeps_its_story_as_lane() -> None:
    slots = PortSlots(41000, 10)
    slots.take("api", "api")
    assert slots.take("api#t2", "api") == SlotPorts(lane="api", slot=1, first=41010, last=41019)


@pytest.mark.parametrize(
    ("base", "per_slot", "lanes", "problem"),
    [
        (41000, 10, 8, None),
        (65530, 1, 6, None),  # the last port is 65535 exactly
        (65530, 1, 7, "7 lane(s) of 1 port(s) from 65530 would need ports up to 65536, past 65535"),
        (41000, 1000, 64, "64 lane(s) of 1000 port(s) from 41000 would need ports up to 104999, past 65535"),
    ],
)
def test_ceiling(base: int, per_slot: int, lanes: int, problem: str | None) -> None:
    assert ceiling_problem(base, per_slot, lanes) == problem
