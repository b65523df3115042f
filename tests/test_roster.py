"""RosterPool: leasing order, clones, waiting, exclusions, moving a call, hand-over, persisted state.

The pool's model boundary is the executor: these tests give it an in-process fake executor whose
turns follow a per-executor plan of outcomes. Everything else (the roster loader, the state file,
the asyncio waiting) is real.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flowd.agents.base import (
    AgentError,
    Executor,
    FailureKind,
    FlowdMeta,
    TurnObserver,
    TurnRequest,
    TurnResult,
)
from flowd.base.errors import EXIT_HALTED, NoExecutor
from flowd.base.timeutil import iso
from flowd.base.timeutil import now as utc_now
from flowd.events.model import (
    Event,
    ExecutorExcluded,
    ExecutorHandedOver,
    ExecutorLeased,
    ExecutorReleased,
    ExecutorResumed,
)
from flowd.roster.leasing import ExecutorState, Lease, clone_to_warm, pick_clone
from flowd.roster.pool import RosterPool
from flowd.roster.state import Holding, after_fault
from flowd.store.config import ExecutorSpec, Roster, load_roster

T0 = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.at = start

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


@dataclass
class FakeExecutor:
    """Answers turns from the plan of its executor id: an AgentError raises, anything else replies."""

    spec: ExecutorSpec
    clone: int
    plans: dict[str, list[AgentError | str]]
    closed: bool = False
    turns: list[str] = field(default_factory=list)
    warmed: list[Path] = field(default_factory=list)  # the folders `warm` started it for

    async def run_turn(self, request: TurnRequest, observe: TurnObserver | None = None) -> TurnResult:
        plan = self.plans.get(self.spec.id, [])
        outcome = plan.pop(0) if plan else "ok"
        self.turns.append(request.prompt)
        if isinstance(outcome, AgentError):
            raise outcome
        return TurnResult(text=f"{outcome} from {self.spec.id}#{self.clone}")

    async def cancel(self) -> None:
        pass

    async def warm(self, cwd: Path) -> None:
        self.warmed.append(cwd)

    async def close(self) -> None:
        self.closed = True


@dataclass
class Harness:
    pool: RosterPool
    events: list[Event]
    made: list[FakeExecutor]
    plans: dict[str, list[AgentError | str]]
    state_path: Path
    roster: Roster

    def of(self, kind: type[Event]) -> list[Event]:  # type: ignore[valid-type]
        return [e for e in self.events if isinstance(e, kind)]


def write_roster(repo: Path, body: str) -> Roster:
    (repo / ".flow").mkdir(parents=True, exist_ok=True)
    (repo / ".flow/demo.script.json").write_text('{"rules": []}', encoding="utf-8")
    (repo / ".flow/roster.toml").write_text(body, encoding="utf-8")
    return load_roster(repo, user_path=repo / "no-user-roster.toml")


def entry(ident: str, roles: str = '"planner", "coder", "reviewer", "judge"', **extra: object) -> str:
    lines = [
        "[[executors]]",
        f'id = "{ident}"',
        'kind = "script"',
        'script = "demo.script.json"',
        f"roles = [{roles}]",
    ]
    for key, value in extra.items():
        lines.append(f"{key} = {json.dumps(value) if not isinstance(value, str) else value}")
    return "\n".join(lines) + "\n"


def make_pool(
    repo: Path, body: str, clock: Callable[[], datetime] | None = None, *, lane_bound: bool = False
) -> Harness:
    roster = write_roster(repo, body)
    events: list[Event] = []
    made: list[FakeExecutor] = []
    plans: dict[str, list[AgentError | str]] = {}

    def factory(spec: ExecutorSpec, *, clone: int, log_dir: Path | None = None) -> Executor:
        executor = FakeExecutor(spec, clone, plans)
        made.append(executor)
        return executor

    state_path = repo / ".flow/roster-state.json"
    pool = RosterPool(
        roster,
        state_path=state_path,
        emit=events.append,
        executor_factory=factory,
        clock=clock or Clock(),
        lane_bound=lane_bound,
    )
    return Harness(pool, events, made, plans, state_path, roster)


def request(prompt: str = "do it", role: str = "coder") -> TurnRequest:
    return TurnRequest(
        role=role, prompt=prompt, cwd=Path("."), meta=FlowdMeta(role=role, run_id="r1", epic_id="e")
    )


async def settle() -> None:
    """Let every ready task run until it blocks (a waiting lease blocks on the pool's change event)."""
    for _ in range(5):
        await asyncio.sleep(0)


def names(leases: list[Lease]) -> list[str]:
    return [lease.name for lease in leases]


async def test_clones_are_numbered_from_one_and_the_lowest_free_is_reused(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("claude", slots=3))
    a, b, c = [await h.pool.lease("coder", label=s) for s in ("s1", "s2", "s3")]
    assert names([a, b, c]) == ["claude#1", "claude#2", "claude#3"]
    h.pool.release(a)
    h.pool.release(a)  # twice: nothing more
    d = await h.pool.lease("coder", label="s4")
    assert d.clone == 1
    leased = [(e.clone, e.label) for e in h.events if isinstance(e, ExecutorLeased)]
    released = [(e.clone, e.label) for e in h.events if isinstance(e, ExecutorReleased)]
    assert leased == [(1, "s1"), (2, "s2"), (3, "s3"), (1, "s4")]
    assert released == [(1, "s1")]


# (held clones, clone → (label, tick) of its last lease, the new lease's label, lane-bound) → clone
PICK_CLONE = [
    ((), {}, "a", False, 1),  # nothing served yet: the lowest
    ((), {}, "a", True, 1),
    ((), {1: ("b", 1), 2: ("a", 2)}, "a", False, 2),  # the lane's own clone, whoever else is free
    ((), {1: ("b", 1), 2: ("a", 2)}, "a", True, 2),
    ((), {1: ("b", 1)}, "a", False, 1),  # processes serve any lane: the lowest (likely running)
    ((), {1: ("b", 1)}, "a", True, 2),  # one lane per process: a clone that never served, not b's
    ((), {1: ("b", 5), 2: ("c", 3), 3: ("d", 4)}, "a", True, 2),  # all served: the longest ago
    ((2,), {1: ("b", 5), 2: ("c", 3), 3: ("d", 4)}, "a", True, 3),  # ... among the free
    ((2,), {2: ("a", 3)}, "a", True, 1),  # the lane's own clone is held (its coder): another one
    ((), {1: ("b", 1)}, None, True, 2),  # no label: no affinity, same rule otherwise
]

# (clone → (label, tick) of its last lease, the lanes ended, the new lease's label) → clone,
# lane-bound, nothing held: a running lane's clone is taken last
PICK_CLONE_ENDED = [
    ({1: ("b", 1), 2: ("c", 5), 3: ("d", 3)}, (), "a", 1),  # none ended: the longest ago
    ({1: ("b", 1), 2: ("c", 5), 3: ("d", 3)}, ("c",), "a", 2),  # c ended: its clone, not b's
    ({1: ("b", 1), 2: ("c", 5), 3: ("d", 3)}, ("c", "d"), "a", 3),  # among the ended: longest ago
    ({1: ("b", 1), 2: ("c", 5)}, ("c",), "a", 3),  # one never served still comes first
    ({1: ("b", 1), 2: (None, 5), 3: ("d", 3)}, (), "a", 2),  # no label: nobody's lane
    ({1: ("a", 9), 2: ("c", 5)}, ("a", "c"), "a", 1),  # its own clone first, even marked ended
    ({1: ("b", 1), 2: ("c", 5), 3: ("d", 3)}, ("c",), None, 2),  # a lease without a label too
]


@pytest.mark.parametrize(("held", "served", "label", "lane_bound", "expected"), PICK_CLONE)
def test_pick_clone(
    held: tuple[int, ...],
    served: dict[int, tuple[str, int]],
    label: str | None,
    lane_bound: bool,
    expected: int,
) -> None:
    spec = ExecutorSpec(id="demo", kind="script", script="demo.script.json", slots=3)
    state = ExecutorState(spec, 0, served=dict(served))
    for clone in held:
        state.held[clone] = Lease("demo", clone, "coder", "x", spec, None)  # type: ignore[arg-type]
    assert pick_clone(state, label, lane_bound=lane_bound) == expected


@pytest.mark.parametrize(("served", "ended", "label", "expected"), PICK_CLONE_ENDED)
def test_pick_clone_takes_a_running_lanes_clone_last(
    served: dict[int, tuple[str | None, int]], ended: tuple[str, ...], label: str | None, expected: int
) -> None:
    spec = ExecutorSpec(id="demo", kind="script", script="demo.script.json", slots=3)
    state = ExecutorState(spec, 0, served=dict(served))
    assert pick_clone(state, label, lane_bound=True, ended=frozenset(ended)) == expected
    # where processes serve any lane, which lanes ended changes nothing
    assert pick_clone(state, label, lane_bound=False, ended=frozenset(ended)) == (
        pick_clone(state, label, lane_bound=False)
    )


# (clones held, each clone's last lane, lanes ended, lane bound) -> the clone warmed for lane "a"
CLONE_TO_WARM = [
    ((), {}, (), True, 1),  # nothing served: the lowest
    ((1,), {1: ("b", 1)}, (), True, 2),  # b holds 1: a never-served one
    ((1, 2), {3: ("a", 2)}, (), True, 3),  # a's own
    ((1, 2), {3: ("c", 2)}, ("c",), True, 3),  # an ended lane's
    ((1, 2), {3: ("c", 2)}, (), True, None),  # c still runs: its process is left alone
    ((1, 2), {3: ("c", 2)}, (), False, 3),  # processes serve any lane: any free one
    ((1, 2, 3), {}, (), True, None),  # none free
]


@pytest.mark.parametrize(("held", "served", "ended", "lane_bound", "expected"), CLONE_TO_WARM)
def test_clone_to_warm(
    held: tuple[int, ...],
    served: dict[int, tuple[str, int]],
    ended: tuple[str, ...],
    lane_bound: bool,
    expected: int | None,
) -> None:
    spec = ExecutorSpec(id="demo", kind="script", script="demo.script.json", slots=3)
    state = ExecutorState(spec, 0, served=dict(served))
    for clone in held:
        state.held[clone] = Lease("demo", clone, "coder", "x", spec, None)  # type: ignore[arg-type]
    target = clone_to_warm([state], "planner", "a", lane_bound=lane_bound, ended=frozenset(ended))
    assert (target[1] if target is not None else None) == expected


async def test_a_lane_bound_pool_keeps_each_lane_on_its_own_clone(tmp_path: Path) -> None:
    """Where each agent process serves one lane (an enforcing sandbox), a lane's helper turns come
    back to the clone that served it, so its confined agent process is not started again."""
    h = make_pool(tmp_path, entry("helpers", slots=3), lane_bound=True)
    order = [
        ("a", "planner"),
        ("b", "planner"),
        ("a", "reviewer"),
        ("c", "planner"),
        ("b", "judge"),
        ("a", "judge"),
    ]
    taken = []
    for label, role in order:
        lease = await h.pool.lease(role, label=label)
        taken.append((label, lease.clone))
        h.pool.release(lease)
    assert taken == [("a", 1), ("b", 2), ("a", 1), ("c", 3), ("b", 2), ("a", 1)]


async def test_a_lanes_planner_is_warmed_ahead_on_the_clone_its_lease_then_takes(tmp_path: Path) -> None:
    """`warm_ahead` starts the agent of the clone a lane's next planner lease takes, without
    leasing it; the clone is the lane's from then on (another lane starting meanwhile takes a
    different one), and a clone whose process serves another running lane is never warmed."""
    h = make_pool(tmp_path, entry("helpers", slots=3), lane_bound=True)
    a_coder = await h.pool.lease("coder", label="a")
    h.pool.warm_ahead("planner", label="a", cwd=tmp_path / "a")
    await h.pool.warmed()
    warmed = {(m.clone, cwd.name) for m in h.made for cwd in m.warmed}
    assert warmed == {(2, "a")} and h.pool.free_slots("planner") == 2
    b_planner = await h.pool.lease("planner", label="b")
    a_planner = await h.pool.lease("planner", label="a")
    assert (a_coder.clone, a_planner.clone, b_planner.clone) == (1, 2, 3)
    for lease in (a_planner, b_planner):
        h.pool.release(lease)
    # a ends; c and d take clones 1 and 2 as coders: the only free clone, 3, is b's (b runs).
    h.pool.lane_ended("a")
    h.pool.release(a_coder)
    c_coder, d_coder = [await h.pool.lease("coder", label=lane) for lane in ("c", "d")]
    assert (c_coder.clone, d_coder.clone) == (1, 2)
    h.pool.warm_ahead("planner", label="c", cwd=tmp_path / "c")
    await h.pool.warmed()
    assert {(m.clone, cwd.name) for m in h.made for cwd in m.warmed} == {(2, "a")}
    h.pool.lane_ended("b")
    h.pool.warm_ahead("planner", label="c", cwd=tmp_path / "c")
    await h.pool.warmed()
    assert {(m.clone, cwd.name) for m in h.made for cwd in m.warmed} == {(2, "a"), (3, "c")}


async def test_the_turn_warmed_ahead_leases_the_executor_that_was_warmed(tmp_path: Path) -> None:
    """Between the warm start and the planner's lease another lane's turn moves the round robin
    on: the planner still takes the executor its agent was started on."""
    helpers = '"planner", "reviewer"'
    body = (
        entry("coders", roles='"coder"')
        + entry("h1", roles=helpers, slots=2)
        + entry("h2", roles=helpers, slots=2)
    )
    h = make_pool(tmp_path, body, lane_bound=True)
    await h.pool.lease("coder", label="a")
    h.pool.warm_ahead("planner", label="a", cwd=tmp_path / "a")
    await h.pool.warmed()
    assert [(m.spec.id, cwd.name) for m in h.made for cwd in m.warmed] == [("h1", "a")]
    reviewer = await h.pool.lease("reviewer", label="b")  # h1 is now the last leased
    assert reviewer.name == "h1#2"  # not a's clone: it is a's from its warm start
    h.pool.release(reviewer)
    planner = await h.pool.lease_unless_coders_hold("planner", label="a")
    assert planner is not None and planner.name == "h1#1"
    h.pool.release(planner)
    again = await h.pool.lease_unless_coders_hold("planner", label="a")  # the preference is spent
    assert again is not None and again.name == "h2#1"


async def test_priority_first_then_least_recently_leased_then_roster_order(tmp_path: Path) -> None:
    body = (
        entry("local", roles='"planner", "reviewer"')
        + entry("codex", slots=2, priority="{ default = 2 }")
        + entry("claude", slots=3, priority=3)
    )
    h = make_pool(tmp_path, body)
    coders = [await h.pool.lease("coder") for _ in range(5)]
    assert names(coders) == ["codex#1", "codex#2", "claude#1", "claude#2", "claude#3"]
    reviewer = await h.pool.lease("reviewer")
    assert reviewer.executor_id == "local"  # text roles: the priority-1 executor that does not code

    h2 = make_pool(tmp_path / "b", entry("a", slots=2) + entry("b", slots=2))
    got = []
    for _ in range(4):
        lease = await h2.pool.lease("planner")
        got.append(lease.executor_id)
        h2.pool.release(lease)
    assert got == ["a", "b", "a", "b"]  # equal priority: the least recently leased goes next


async def test_prefer_wins_at_equal_priority_but_never_over_a_better_one(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a") + entry("b") + entry("c", priority=2))
    lease = await h.pool.lease("coder", prefer="b")
    assert lease.executor_id == "b"
    h.pool.release(lease)
    lease = await h.pool.lease("coder", prefer="c")
    assert lease.executor_id == "a"  # c has a worse priority
    held = [lease, await h.pool.lease("coder")]  # a and b both held now
    lease = await h.pool.lease("coder", prefer="c")
    assert lease.executor_id == "c" and {x.executor_id for x in held} == {"a", "b"}


async def test_prefer_not_ranks_last_without_waiting(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a") + entry("b", priority=5))
    lease = await h.pool.lease("reviewer", prefer_not=frozenset({"a"}))
    assert lease.executor_id == "b"
    again = await h.pool.lease("reviewer", prefer_not=frozenset({"a"}))
    assert again.executor_id == "a"  # b is busy: independence is not worth a wait


async def test_coder_slots_are_respected_while_other_roles_still_lease(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("claude", slots=3, coderSlots=1))
    coder = await h.pool.lease("coder", label="s1")
    assert h.pool.free_slots("coder") == 0 and h.pool.free_slots("reviewer") == 2
    waiting = asyncio.create_task(h.pool.lease("coder", label="s2"))
    reviewer = await h.pool.lease("reviewer")
    await settle()
    assert not waiting.done() and reviewer.clone == 2
    h.pool.release(reviewer)
    await settle()
    assert not waiting.done()  # a freed reviewer slot is no coder slot
    h.pool.release(coder)
    second = await waiting
    assert second.name == "claude#1" and second.label == "s2"


@pytest.mark.parametrize(
    ("held_role", "unless_coders_hold"),
    [("coder", False), ("judge", True)],  # a wait that may give up still takes a slot freed for it
)
async def test_a_waiting_lease_takes_the_slot_a_release_frees(
    tmp_path: Path, held_role: str, unless_coders_hold: bool
) -> None:
    h = make_pool(tmp_path, entry("solo"))
    held = await h.pool.lease(held_role, label="s1")
    pool = h.pool
    wait = pool.lease_unless_coders_hold if unless_coders_hold else pool.lease
    waiting = asyncio.create_task(wait("planner", label="s2"))
    await settle()
    assert not waiting.done()
    h.pool.release(held)
    lease = await asyncio.wait_for(waiting, 5)
    assert lease is not None and lease.name == "solo#1" and lease.role == "planner"


async def test_a_wait_gives_up_once_a_coder_takes_the_last_slot(tmp_path: Path) -> None:
    """A planner waiting while a reviewer holds the last slot, which a story's coder takes as
    soon as it is released: from then on only coders hold the slots, and the planner gives up
    (its caller borrows its own story's coder clone) rather than waiting for that whole story."""
    h = make_pool(tmp_path, entry("duo", slots=2))
    await h.pool.lease("coder", label="s1")
    reviewer = await h.pool.lease("reviewer", label="s0")
    waiting = asyncio.create_task(h.pool.lease_unless_coders_hold("planner", label="s1"))
    await settle()
    assert not waiting.done()  # a reviewer's turn ends soon: worth waiting for
    h.pool.release(reviewer)
    second = h.pool.try_lease("coder", label="s2")  # before the waiting task runs again
    assert second is not None
    assert await asyncio.wait_for(waiting, 5) is None
    assert h.pool.coders_hold_all("planner")
    h.pool.release(second)
    assert not h.pool.coders_hold_all("planner")
    lease = await h.pool.lease_unless_coders_hold("planner", label="s1")
    assert lease is not None and lease.name == "duo#2"


async def test_cancelling_a_waiting_lease_leaves_no_held_slot(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo"))
    held = await h.pool.lease("coder")
    waiting = asyncio.create_task(h.pool.lease("coder"))
    await settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    h.pool.release(held)
    assert h.pool.free_slots("coder") == 1
    assert all(not v.held for v in h.pool.snapshot().executors)
    assert len(h.of(ExecutorLeased)) == 1


async def test_leased_releases_when_the_holder_raises(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo"))
    with pytest.raises(RuntimeError):
        async with h.pool.leased("coder", label="s1") as lease:
            assert lease.name == "solo#1"
            raise RuntimeError("boom")
    assert h.pool.free_slots("coder") == 1
    assert len(h.of(ExecutorReleased)) == 1


async def test_the_same_clone_keeps_its_executor_and_aclose_closes_all(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo", slots=2))
    first = await h.pool.lease("coder")
    other = await h.pool.lease("coder")
    executor = first.executor
    assert other.executor is not executor
    h.pool.release(first)
    again = await h.pool.lease("planner")
    assert again.clone == 1 and again.executor is executor
    await h.pool.aclose()
    assert len(h.made) == 2 and all(e.closed for e in h.made)


async def test_rate_limit_excludes_and_the_call_moves_once(tmp_path: Path) -> None:
    clock = Clock()
    h = make_pool(tmp_path, entry("a") + entry("b", priority=2), clock)
    h.plans["a"] = [AgentError("rate_limit", "rate limit exceeded")]
    result, info = await h.pool.run("coder", request(), label="s1")
    assert info.executor == "b" and result.text == "ok from b#1"
    [excluded] = h.of(ExecutorExcluded)
    assert isinstance(excluded, ExecutorExcluded) and excluded.executor == "a"
    assert excluded.until == iso(T0 + timedelta(seconds=15)) and "rate limited" in excluded.reason
    [moved] = h.of(ExecutorHandedOver)
    assert isinstance(moved, ExecutorHandedOver)
    assert (moved.from_, moved.to, moved.role, moved.label) == ("a", "b", "coder", "s1")
    assert h.pool.free_slots("coder") == 1  # b free again, a out

    # A second hit within the window keeps it out for the long cool-down.
    clock.advance(20)
    h.plans["a"] = [AgentError("rate_limit", "429 too many requests")]
    h.plans["b"] = [AgentError("rate_limit", "429 too many requests")]
    with pytest.raises(AgentError) as caught:
        await h.pool.run("coder", request())
    assert caught.value.kind == "rate_limit"  # moved once (a → b), b failed too: surfaces
    excluded_a = [e for e in h.of(ExecutorExcluded) if isinstance(e, ExecutorExcluded) and e.executor == "a"]
    assert excluded_a[-1].until == iso(clock() + timedelta(seconds=600))
    assert "2 rate limits within 60s" in excluded_a[-1].reason


async def test_a_failure_that_is_not_the_executors_fault_is_not_retried(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a") + entry("b"))
    h.plans["a"] = [AgentError("bad_reply", "not JSON")]
    with pytest.raises(AgentError):
        await h.pool.run("reviewer", request(role="reviewer"))
    assert not h.of(ExecutorExcluded) and not h.of(ExecutorHandedOver)
    assert h.pool.free_slots("reviewer") == 2
    assert [m.turns for m in h.made] == [["do it"]]


async def test_usage_limit_honours_the_reset_time_and_persists(tmp_path: Path) -> None:
    clock = Clock()
    h = make_pool(tmp_path, entry("a") + entry("b"), clock)
    reset = T0 + timedelta(hours=2)
    lease = await h.pool.lease("coder")
    assert h.pool.fail(lease, AgentError("usage_limit", "usage limit reached", reset_at=reset))
    h.pool.release(lease)
    stored = json.loads(h.state_path.read_text())
    assert stored["schemaVersion"] == 1
    assert stored["exclusions"] == [
        {"executor": "a", "kind": "until", "reason": "usage limit (usage limit reached)", "until": iso(reset)}
    ]

    # A new run (a new pool) before the reset still keeps a out ...
    clock.advance(3600)
    h2 = make_pool(tmp_path, entry("a") + entry("b"), clock)
    view = {v.id: v for v in h2.pool.snapshot().executors}
    assert view["a"].excluded is not None and view["a"].excluded.until == iso(reset)
    assert (await h2.pool.lease("coder")).executor_id == "b"
    # ... and after it, the entry is dropped and a is back.
    clock.advance(3601)
    h3 = make_pool(tmp_path, entry("a") + entry("b"), clock)
    assert h3.pool.free_slots("coder") == 2
    assert (await h3.pool.lease("coder")).executor_id == "a"


async def test_usage_limit_without_a_reset_time_is_one_hour(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a"))
    lease = await h.pool.lease("planner")
    h.pool.fail(lease, AgentError("usage_limit", "You've hit your limit"))
    [excluded] = h.of(ExecutorExcluded)
    assert isinstance(excluded, ExecutorExcluded) and excluded.until == iso(T0 + timedelta(hours=1))


async def test_a_waiting_lease_completes_when_the_exclusion_ends(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo"), clock=utc_now)
    lease = await h.pool.lease("coder")
    reset = utc_now() + timedelta(milliseconds=200)
    h.pool.fail(lease, AgentError("usage_limit", "usage limit reached", reset_at=reset))
    h.pool.release(lease)
    assert h.pool.free_slots("coder") == 0
    again = await asyncio.wait_for(h.pool.lease("coder", label="s2"), timeout=10)
    assert again.name == "solo#1" and utc_now() >= reset
    resumed = [(e.executor, e.reason) for e in h.events if isinstance(e, ExecutorResumed)]
    assert resumed == [("solo", "expired")]
    assert json.loads(h.state_path.read_text())["exclusions"] == []
    await h.pool.aclose()


async def test_auth_excludes_for_the_run_and_then_no_executor_can_serve(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a") + entry("b", roles='"reviewer"'))
    h.plans["a"] = [AgentError("auth", "not logged in")]
    with pytest.raises(NoExecutor) as caught:
        await h.pool.run("coder", request(), label="s1")
    error = caught.value
    assert error.exit_code == EXIT_HALTED and error.role == "coder"
    assert "coder" in error.message and str(tmp_path / ".flow/roster.toml") in error.message
    assert "a is out for this run: not signed in" in error.message
    assert not h.state_path.exists() or json.loads(h.state_path.read_text())["exclusions"] == []
    with pytest.raises(NoExecutor):
        await h.pool.lease("planner")
    assert (await h.pool.lease("reviewer")).executor_id == "b"


async def test_an_answer_wait_takes_back_executors_out_for_the_run(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a"))
    h.plans["a"] = [AgentError("auth", "not logged in")]
    with pytest.raises(NoExecutor):
        await h.pool.run("coder", request(), label="s1")
    assert h.pool.readmit() == ["a"]  # docs/answers.md: `wait` on a noExecutor pause
    assert h.pool.can_ever_serve("coder")
    assert (await h.pool.lease("coder")).executor_id == "a"
    assert h.pool.readmit() == []


async def test_a_role_nobody_takes_fails_at_once(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a", roles='"reviewer"'))
    with pytest.raises(NoExecutor, match="no executor in the roster takes the coder role"):
        await h.pool.lease("coder")


async def test_hand_over_moves_a_held_coder_to_another_executor(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a") + entry("b", priority=2))
    held = await h.pool.lease("coder", label="api")
    new = await h.pool.hand_over(held, AgentError("usage_limit", "usage limit reached"))
    assert new.executor_id == "b" and new.label == "api" and held.released
    kinds = [type(e).__name__ for e in h.events]
    assert kinds == [
        "ExecutorLeased",
        "ExecutorExcluded",
        "ExecutorLeased",
        "ExecutorHandedOver",
        "ExecutorReleased",
    ]
    [moved] = h.of(ExecutorHandedOver)
    assert isinstance(moved, ExecutorHandedOver)
    assert (moved.from_, moved.to, moved.label) == ("a", "b", "api")
    assert moved.reason.startswith("out until ") and "usage limit" in moved.reason


async def test_hand_over_with_nobody_else_waits_for_the_same_executor(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo"))
    held = await h.pool.lease("coder", label="api")
    with pytest.raises(NoExecutor):
        await h.pool.hand_over(held, AgentError("auth", "not logged in"))
    assert held.released and h.pool.free_slots("coder") == 0


async def test_crash_backs_off_doubling_and_respawns_the_agent(tmp_path: Path) -> None:
    clock = Clock()
    h = make_pool(tmp_path, entry("a"), clock)
    lease = await h.pool.lease("coder")
    first = lease.executor
    assert h.pool.fail(lease, AgentError("crash", "agent exited with code 1"))
    h.pool.release(lease)
    await h.pool.aclose()
    assert isinstance(first, FakeExecutor) and first.closed
    untils = [e.until for e in h.events if isinstance(e, ExecutorExcluded)]
    assert untils == [iso(T0 + timedelta(seconds=30))]
    clock.advance(30)
    lease = await h.pool.lease("coder")
    assert lease.executor is not first
    h.pool.fail(lease, AgentError("unavailable", "connection refused"))
    untils = [e.until for e in h.events if isinstance(e, ExecutorExcluded)]
    assert untils[-1] == iso(clock() + timedelta(seconds=60))
    reasons = [e.reason for e in h.events if isinstance(e, ExecutorResumed)]
    assert reasons == ["back-off over, trying it again"]


async def test_snapshot_shows_held_clones_and_exclusions(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a", slots=2) + entry("b"))
    await h.pool.lease("coder", label="api")
    lease = await h.pool.lease("coder", label="ui")
    assert lease.executor_id == "b"
    h.pool.fail(lease, AgentError("usage_limit", "usage limit reached"))
    view = h.pool.snapshot().wire()
    assert view["executors"] == [
        {
            "id": "a",
            "kind": "script",
            "roles": ["planner", "coder", "reviewer", "judge"],
            "slots": 2,
            "coderSlots": 2,
            "held": [{"clone": 1, "role": "coder", "label": "api"}],
        },
        {
            "id": "b",
            "kind": "script",
            "roles": ["planner", "coder", "reviewer", "judge"],
            "slots": 1,
            "coderSlots": 1,
            "held": [{"clone": 1, "role": "coder", "label": "ui"}],
            "excluded": {
                "kind": "until",
                "reason": "usage limit (usage limit reached)",
                "until": iso(T0 + timedelta(hours=1)),
            },
        },
    ]


async def test_state_file_keeps_other_rosters_entries_and_ignores_garbage(tmp_path: Path) -> None:
    clock = Clock()
    state = tmp_path / ".flow/roster-state.json"
    state.parent.mkdir(parents=True)
    other = {
        "executor": "elsewhere",
        "kind": "until",
        "reason": "usage limit",
        "until": iso(T0 + timedelta(hours=1)),
    }
    stale = {
        "executor": "old",
        "kind": "until",
        "reason": "usage limit",
        "until": iso(T0 - timedelta(hours=1)),
    }
    state.write_text(json.dumps({"schemaVersion": 1, "exclusions": [other, stale]}))
    h = make_pool(tmp_path, entry("a"), clock)
    lease = await h.pool.lease("coder")
    h.pool.fail(lease, AgentError("usage_limit", "usage limit reached"))
    assert [e["executor"] for e in json.loads(state.read_text())["exclusions"]] == ["a", "elsewhere"]

    state.write_text("{not json")
    h2 = make_pool(tmp_path, entry("a"), clock)
    assert h2.pool.free_slots("coder") == 1


@pytest.mark.parametrize(
    ("holding", "kind", "excluded", "retried", "expected"),
    [
        ("leased", "rate_limit", True, False, "elsewhere"),  # moved once
        ("leased", "rate_limit", True, True, None),  # a second failure is the call's own
        ("leased", "timeout", False, False, None),  # the executor still serves
        ("leased", "error", True, False, None),  # not an executor fault
        ("borrowed", "crash", True, False, "same"),  # the story's own clone is the only one
        ("borrowed", "crash", False, False, None),
        ("borrowed", "crash", True, True, None),
        ("held", "stall", False, False, "elsewhere"),  # a held coder is handed over, excluded or not
        ("held", "stall", True, True, None),
        ("held", "error", True, False, None),
        ("parallel", "usage_limit", True, False, None),  # a parallel task fails on its own
    ],
)
def test_after_an_executor_fault(
    holding: Holding, kind: FailureKind, excluded: bool, retried: bool, expected: str | None
) -> None:
    assert after_fault(holding, kind, excluded=excluded, retried=retried) == expected
