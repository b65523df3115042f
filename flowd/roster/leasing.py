"""The leasing rules of the executor pool (`pool.py`): each executor's clones and who holds them,
and which executor a lease takes.

Leasing order for a role: executors that serve it, are not excluded, not avoided and have a free
slot (a coder also needs a free coder slot); lowest priority for the role first, then the one
leased least recently, then roster order; `prefer` wins against executors of equal priority.
Within the executor, `pick_clone` chooses the clone. When nothing can ever serve the role,
`hopeless` says why.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from flowd.agents.base import AgentError, Executor
from flowd.roster.state import Exclusion, Health
from flowd.store.config import ExecutorSpec


class LeaseOwner(Protocol):
    """The pool a lease came from: it keeps each clone's live agent connection."""

    def _executor_for(self, lease: Lease) -> Executor: ...


@dataclass(frozen=True)
class LeaseInfo:
    """What a finished call ran on (for events and usage attribution)."""

    executor: str
    clone: int
    role: str
    label: str | None
    model: str | None


@dataclass(eq=False)
class Lease:
    """One slot of one executor held for one role; `clone` is the slot's number (`claude#2`)."""

    executor_id: str
    clone: int
    role: str
    label: str | None
    spec: ExecutorSpec
    _pool: LeaseOwner = field(repr=False)
    released: bool = False
    _reported: AgentError | None = field(default=None, repr=False)

    @property
    def executor(self) -> Executor:
        """The live agent connection of this clone (kept across leases of the same clone)."""
        return self._pool._executor_for(self)

    @property
    def name(self) -> str:
        return f"{self.executor_id}#{self.clone}"

    @property
    def info(self) -> LeaseInfo:
        return LeaseInfo(self.executor_id, self.clone, self.role, self.label, self.spec.model)


@dataclass
class ExecutorState:
    """One executor of the roster in the pool: who holds its clones, when it was last leased, its
    exclusion and health."""

    spec: ExecutorSpec
    order: int
    held: dict[int, Lease] = field(default_factory=dict)  # clone → lease
    last_leased: int = -1
    # clone → the label and lease count of its last lease (`pick_clone`)
    served: dict[int, tuple[str | None, int]] = field(default_factory=dict)
    exclusion: Exclusion | None = None
    health: Health = field(default_factory=Health)

    @property
    def busy_coders(self) -> int:
        return sum(1 for lease in self.held.values() if lease.role == "coder")

    def free_for(self, role: str) -> int:
        free = self.spec.slots - len(self.held)
        if role == "coder":
            free = min(free, self.spec.coder_capacity - self.busy_coders)
        return max(0, free) if role in self.spec.roles else 0


def pick(
    states: Iterable[ExecutorState],
    role: str,
    prefer: str | None,
    avoid: frozenset[str],
    prefer_not: frozenset[str],
) -> ExecutorState | None:
    """The executor the next lease of `role` takes, or None when none is free now."""
    candidates = [
        s for s in states if s.spec.id not in avoid and s.exclusion is None and s.free_for(role) > 0
    ]
    if not candidates:
        return None
    candidates.sort(
        key=lambda s: (s.spec.id in prefer_not, s.spec.priority_for(role), s.last_leased, s.order)
    )
    best = candidates[0]
    if prefer is not None and prefer != best.spec.id:
        chosen = next((s for s in candidates if s.spec.id == prefer), None)
        # Continuity breaks ties; it never overrides a better priority (or independence).
        if chosen is not None and (chosen.spec.id in prefer_not, chosen.spec.priority_for(role)) <= (
            best.spec.id in prefer_not,
            best.spec.priority_for(role),
        ):
            return chosen
    return best


def pick_clone(
    state: ExecutorState, label: str | None, *, lane_bound: bool, ended: Collection[str] = ()
) -> int:
    """The free clone a lease labelled `label` takes (the executor has one free).

    The clone that last served the same label first: its agent process is still the lane's, with
    its session. Otherwise, where an agent process serves one lane for life (`lane_bound`: an
    enforcing sandbox, docs/sandbox.md), whichever clone is taken starts a new process, so it
    takes one that never served (no other lane's live process is stopped), else one whose lane has
    ended (`ended`: the labels of lanes that will not come back for it; no label counts as ended),
    else the one served longest ago (the lane least likely to come back for it). A clone of a lane
    still running is taken last: that lane's next helper turn (its reviewer, after a coder turn of
    minutes) would start its agent again (docs/performance.md "Between the turns"). Where
    processes serve any lane, the lowest free clone, the one most likely to be running already.
    """
    free = [n for n in range(1, state.spec.slots + 1) if n not in state.held]
    if label is not None:
        same = [n for n in free if n in state.served and state.served[n][0] == label]
        if same:
            return same[0]
    if not lane_bound:
        return free[0]

    def rank(n: int) -> tuple[int, int, int]:
        if n not in state.served:
            return (0, -1, n)
        return (2 if serves_running_lane(state, n, ended) else 1, state.served[n][1], n)

    return min(free, key=rank)


def clone_to_warm(
    states: Iterable[ExecutorState], role: str, label: str, *, lane_bound: bool, ended: Collection[str]
) -> tuple[ExecutorState, int] | None:
    """The executor and clone the next lease of `role` for the lane `label` would take, to start
    its agent ahead (`RosterPool.warm_ahead`); None when none is free, or, where a process serves
    one lane for life, when that clone's process is another running lane's (stopping it would
    cost that lane a start)."""
    state = pick(states, role, None, frozenset(), frozenset())
    if state is None:
        return None
    clone = pick_clone(state, label, lane_bound=lane_bound, ended=ended)
    served = state.served.get(clone)
    if lane_bound and served is not None and served[0] != label and serves_running_lane(state, clone, ended):
        return None
    return state, clone


def serves_running_lane(state: ExecutorState, clone: int, ended: Collection[str]) -> bool:
    """The clone last served a lane that still runs (`ended`: the labels of lanes that ended): where
    a process serves one lane for life, its process is that lane's."""
    served = state.served.get(clone)
    return served is not None and served[0] is not None and served[0] not in ended


def coders_hold_all(states: Iterable[ExecutorState], role: str) -> bool:
    """No slot for `role` is free on an executor not excluded, and every slot of the executors
    that could serve it is held by a story's coder (none will be freed by a brief turn)."""
    able = [s for s in states if role in s.spec.roles and s.exclusion is None]
    if any(s.free_for(role) > 0 for s in able):
        return False
    return all(lease.role == "coder" for s in able for lease in s.held.values())


def can_ever_serve(states: Iterable[ExecutorState], role: str, avoid: frozenset[str]) -> bool:
    """Some executor outside `avoid` serves the role and is not excluded for the run."""
    return any(
        role in s.spec.roles
        and (role != "coder" or s.spec.coder_capacity > 0)
        and s.spec.id not in avoid
        and (s.exclusion is None or s.exclusion.kind != "run")
        for s in states
    )


def hopeless(states: Iterable[ExecutorState], role: str, avoid: frozenset[str], described: str) -> str:
    """Why no executor can ever take `role` (the `NoExecutor` message)."""
    where = f"roster: {described}"
    serving = [s for s in states if role in s.spec.roles]
    if not serving:
        return f'no executor in the roster takes the {role} role ({where}); add one with roles = ["{role}"]'
    reasons = []
    for s in serving:
        if s.spec.id in avoid:
            reasons.append(f"{s.spec.id} is avoided for this call")
        elif s.exclusion is not None:
            reasons.append(f"{s.spec.id} is {s.exclusion.describe()}")
        else:
            reasons.append(f"{s.spec.id} has no coder slots")
    return f"no executor can take the {role} role: {'; '.join(reasons)} ({where})"


def planned_clones(
    states: dict[str, ExecutorState], role: str, count: int, counter: int
) -> list[tuple[str, int]]:
    """The (executor, clone) of the next `count` leases of `role` if nothing were released,
    by the same ranking as `pick` (without `prefer`/`avoid`, which only a story knows);
    `counter` is the pool's lease count so far."""
    used = {ident: set(s.held) for ident, s in states.items()}
    coders = {ident: s.busy_coders for ident, s in states.items()}
    last = {ident: s.last_leased for ident, s in states.items()}
    out: list[tuple[str, int]] = []
    for tick in range(count):
        able = [
            s
            for s in states.values()
            if s.exclusion is None
            and role in s.spec.roles
            and len(used[s.spec.id]) < s.spec.slots
            and (role != "coder" or coders[s.spec.id] < s.spec.coder_capacity)
        ]
        if not able:
            break
        best = min(able, key=lambda s: (s.spec.priority_for(role), last[s.spec.id], s.order))
        ident = best.spec.id
        clone = next(n for n in range(1, best.spec.slots + 1) if n not in used[ident])
        used[ident].add(clone)
        coders[ident] += role == "coder"
        last[ident] = counter + tick + 1
        out.append((ident, clone))
    return out
