"""The executor pool of a run: leases, clones, exclusions, moving a call and handing over a coder.

Leasing order for a role: executors that serve it, are not excluded, not avoided and have a free
slot (a coder also needs a free coder slot); lowest priority for the role first, then the one
leased least recently, then roster order; `prefer` wins against executors of equal priority. A
lease takes the lowest free clone number of its executor. When nothing is free the lease waits
for a release or an exclusion's end; when nothing can ever serve the role it fails with
`NoExecutor` (exit 3).

All bookkeeping is synchronous and runs on the event loop, so no lock is needed: the only await
in `lease` is the wait for a change, and a cancelled wait has taken nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from flowd.agents.base import AgentError, Executor, TurnObserver, TurnRequest, TurnResult
from flowd.agents.factory import make_executor
from flowd.base.errors import FlowdError, NoExecutor
from flowd.base.timeutil import iso
from flowd.base.timeutil import now as utc_now
from flowd.base.wire import WireModel
from flowd.roster.state import (
    Exclusion,
    ExclusionPolicy,
    Health,
    after_fault,
    decide,
    load_exclusions,
    save_exclusions,
)
from flowd.store.config import ExecutorSpec, Roster
from flowd.trace.events import (
    Event,
    ExecutorExcluded,
    ExecutorHandedOver,
    ExecutorLeased,
    ExecutorReleased,
    ExecutorResumed,
)

# Failures after which a clone's agent process is not trusted again: it is closed and respawned.
DISCARD_ON = frozenset({"crash", "stall", "unavailable", "auth", "timeout"})

# Agent processes `prestart` starts at once: a start is mostly CPU (an interpreter importing its
# SDK), so more than the cores only makes every clone late; the first story's come first.
PRESTART_PARALLEL = max(2, os.cpu_count() or 2)


class ExecutorFactory(Protocol):
    def __call__(self, spec: ExecutorSpec, *, clone: int, log_dir: Path | None = None) -> Executor: ...


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
    _pool: RosterPool = field(repr=False)
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


class HeldClone(WireModel):
    clone: int
    role: str
    label: str | None = None


class ExclusionView(WireModel):
    kind: str
    reason: str
    until: str | None = None


class ExecutorView(WireModel):
    id: str
    kind: str
    model: str | None = None
    roles: list[str]
    slots: int
    coder_slots: int
    held: list[HeldClone]
    excluded: ExclusionView | None = None


class RosterView(WireModel):
    executors: list[ExecutorView]
    sources: list[str]


@dataclass
class _State:
    spec: ExecutorSpec
    order: int
    held: dict[int, Lease] = field(default_factory=dict)  # clone → lease
    last_leased: int = -1
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


class RosterPool:
    def __init__(
        self,
        roster: Roster,
        *,
        state_path: Path,
        emit: Callable[[Event], None],
        executor_factory: ExecutorFactory = make_executor,
        clock: Callable[[], datetime] = utc_now,
        policy: ExclusionPolicy | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self._roster = roster
        self._state_path = state_path
        self._emit = emit
        self._factory = executor_factory
        self._clock = clock
        self._policy = policy or ExclusionPolicy()
        self._log_dir = log_dir
        self._states = {spec.id: _State(spec, i) for i, spec in enumerate(roster.executors)}
        self._counter = 0
        self._changed = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: datetime | None = None
        self._executors: dict[tuple[str, int], Executor] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._warming: set[asyncio.Task[None]] = set()
        for ident, exclusion in load_exclusions(state_path, set(self._states), clock()).items():
            self._states[ident].exclusion = exclusion

    # --- leasing ---------------------------------------------------------------------------------

    async def lease(
        self,
        role: str,
        *,
        label: str | None = None,
        prefer: str | None = None,
        avoid: frozenset[str] = frozenset(),
        prefer_not: frozenset[str] = frozenset(),
    ) -> Lease:
        """A slot for `role`; waits while every able executor is busy or briefly excluded.

        `avoid` is strict (those executors are never taken); `prefer_not` only ranks them last
        among the free ones (independence when it is available, never a wait for it).
        """
        while True:
            self._expire()
            state = self._pick(role, prefer, avoid, prefer_not)
            if state is not None:
                return self._take(state, role, label)
            if not self.can_ever_serve(role, avoid=avoid):
                raise NoExecutor(role, self._hopeless(role, avoid))
            changed = self._changed
            self._arm_timer()
            await changed.wait()

    async def wait_back(self, executor_id: str, role: str) -> None:
        """Wait until `executor_id` is no longer excluded (a borrowed turn's executor is the only
        one it can use); `NoExecutor` when it is out for the run."""
        state = self._states[executor_id]
        while True:
            self._expire()
            if state.exclusion is None:
                return
            if state.exclusion.kind == "run":
                raise NoExecutor(role, self._hopeless(role, frozenset()))
            changed = self._changed
            self._arm_timer()
            await changed.wait()

    def try_lease(
        self,
        role: str,
        *,
        label: str | None = None,
        prefer: str | None = None,
        avoid: frozenset[str] = frozenset(),
        prefer_not: frozenset[str] = frozenset(),
    ) -> Lease | None:
        """A slot now, or None (never waits)."""
        self._expire()
        state = self._pick(role, prefer, avoid, prefer_not)
        return None if state is None else self._take(state, role, label)

    def release(self, lease: Lease) -> None:
        """Give the slot back; releasing twice does nothing the second time."""
        if lease.released:
            return
        lease.released = True
        state = self._states[lease.executor_id]
        if state.held.get(lease.clone) is lease:
            del state.held[lease.clone]
        self._emit(
            ExecutorReleased(
                executor=lease.executor_id, clone=lease.clone, role=lease.role, label=lease.label
            )
        )
        self._signal()

    @contextlib.asynccontextmanager
    async def leased(
        self,
        role: str,
        *,
        label: str | None = None,
        prefer: str | None = None,
        avoid: frozenset[str] = frozenset(),
        prefer_not: frozenset[str] = frozenset(),
    ) -> AsyncIterator[Lease]:
        """A lease released however the holder ends (return, exception, cancellation)."""
        lease = await self.lease(role, label=label, prefer=prefer, avoid=avoid, prefer_not=prefer_not)
        try:
            yield lease
        finally:
            self.release(lease)

    def _pick(
        self, role: str, prefer: str | None, avoid: frozenset[str], prefer_not: frozenset[str]
    ) -> _State | None:
        candidates = [
            s
            for s in self._states.values()
            if s.spec.id not in avoid and s.exclusion is None and s.free_for(role) > 0
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

    def _take(self, state: _State, role: str, label: str | None) -> Lease:
        clone = next(n for n in range(1, state.spec.slots + 1) if n not in state.held)
        self._counter += 1
        state.last_leased = self._counter
        lease = Lease(state.spec.id, clone, role, label, state.spec, self)
        state.held[clone] = lease
        self._emit(ExecutorLeased(executor=state.spec.id, clone=clone, role=role, label=label))
        return lease

    def can_ever_serve(self, role: str, *, avoid: frozenset[str] = frozenset()) -> bool:
        """Some executor outside `avoid` serves the role and is not excluded for the run."""
        return any(
            role in s.spec.roles
            and (role != "coder" or s.spec.coder_capacity > 0)
            and s.spec.id not in avoid
            and (s.exclusion is None or s.exclusion.kind != "run")
            for s in self._states.values()
        )

    def _hopeless(self, role: str, avoid: frozenset[str]) -> str:
        where = f"roster: {self._roster.described}"
        serving = [s for s in self._states.values() if role in s.spec.roles]
        if not serving:
            return (
                f'no executor in the roster takes the {role} role ({where}); add one with roles = ["{role}"]'
            )
        reasons = []
        for s in serving:
            if s.spec.id in avoid:
                reasons.append(f"{s.spec.id} is avoided for this call")
            elif s.exclusion is not None:
                reasons.append(f"{s.spec.id} is {s.exclusion.describe()}")
            else:
                reasons.append(f"{s.spec.id} has no coder slots")
        return f"no executor can take the {role} role: {'; '.join(reasons)} ({where})"

    # --- exclusions ------------------------------------------------------------------------------

    def fail(self, lease: Lease, error: AgentError) -> bool:
        """Record a failed call on the lease's executor; True if the executor is now excluded."""
        state = self._states[lease.executor_id]
        if lease._reported is not error:
            lease._reported = error
            if error.kind in DISCARD_ON:
                self._discard(lease.executor_id, lease.clone)
            now = self._clock()
            exclusion = decide(
                lease.executor_id, error.kind, error.message, error.reset_at, now, state.health, self._policy
            )
            if exclusion is not None:
                self._exclude(state, exclusion)
        return state.exclusion is not None

    def succeeded(self, lease: Lease) -> None:
        """A call worked: forget the executor's back-off and rate-limit history."""
        state = self._states[lease.executor_id]
        state.health = Health()

    def _exclude(self, state: _State, exclusion: Exclusion) -> None:
        state.exclusion = exclusion
        until = iso(exclusion.until) if exclusion.until is not None else None
        self._emit(ExecutorExcluded(executor=state.spec.id, reason=exclusion.describe(), until=until))
        self._save()
        self._arm_timer()
        self._signal()

    def readmit(self) -> list[str]:
        """Take back every executor excluded for the run (an answer `wait` to a `noExecutor`
        pause: the person fixed what was wrong, docs/answers.md); their ids."""
        back = [s for s in self._states.values() if s.exclusion is not None and s.exclusion.kind == "run"]
        for state in back:
            state.exclusion = None
            state.health = Health()
            self._emit(ExecutorResumed(executor=state.spec.id, reason="taken back by an answer (wait)"))
        if back:
            self._save()
            self._signal()
        return [s.spec.id for s in back]

    def _expire(self) -> None:
        now = self._clock()
        expired = [
            s
            for s in self._states.values()
            if s.exclusion is not None and s.exclusion.until is not None and s.exclusion.until <= now
        ]
        for state in expired:
            assert state.exclusion is not None
            reason = "back-off over, trying it again" if state.exclusion.kind == "backoff" else "expired"
            until = iso(state.exclusion.until) if state.exclusion.until else None
            state.exclusion = None
            self._emit(ExecutorResumed(executor=state.spec.id, reason=reason, until=until))
        if expired:
            self._save()
            self._signal()

    def _save(self) -> None:
        current = {s.spec.id: s.exclusion for s in self._states.values() if s.exclusion is not None}
        try:
            save_exclusions(self._state_path, set(self._states), current, self._clock())
        except OSError as exc:  # advisory state: a run goes on without it
            print(f"flowd: could not save {self._state_path}: {exc}", file=sys.stderr)

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _arm_timer(self) -> None:
        """One loop timer at the next exclusion end, so waiting leases wake without polling."""
        ends = [
            s.exclusion.until
            for s in self._states.values()
            if s.exclusion is not None and s.exclusion.until is not None
        ]
        soonest = min(ends, default=None)
        if soonest == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = soonest
        if soonest is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # armed by the first lease
        delay = max(0.0, (soonest - self._clock()).total_seconds())
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._expire()
        self._arm_timer()

    async def leave_lane(self, worktree: Path) -> None:
        """Stop every idle agent process confined to the lane worktree `worktree`, which another
        lane takes next (docs/repositories.md "Worktree reuse"); a held clone is left alone."""
        for (executor_id, clone), executor in list(self._executors.items()):
            state = self._states.get(executor_id)
            leave = getattr(executor, "leave_lane", None)
            if leave is None or (state is not None and clone in state.held):
                continue
            with contextlib.suppress(Exception):
                await leave(worktree)

    # --- executors -------------------------------------------------------------------------------

    def _executor_for(self, lease: Lease) -> Executor:
        return self._executor_for_clone(lease.spec, lease.clone)

    def _executor_for_clone(self, spec: ExecutorSpec, clone: int) -> Executor:
        key = (spec.id, clone)
        executor = self._executors.get(key)
        if executor is None:
            executor = self._factory(spec, clone=clone, log_dir=self._log_dir)
            self._executors[key] = executor
        return executor

    def prestart(self, needs: dict[str, int], cwd: Path) -> None:
        """Start, in the background, the agent processes of the clones that the first leases of
        each role will take (`needs`: role → how many leases are expected at once), so a story's
        first turns do not wait for an agent to start (docs/performance.md: throughput).

        The clones are the ones `lease` would pick (priority, then round robin, roster order),
        planned without taking anything; roles are interleaved so the first story's agents start
        first, and at most `PRESTART_PARALLEL` start at once. Kinds without a `warm` (CLI and
        OpenAI executors start nothing ahead) are skipped; the executors are the clones' own, so
        `aclose` ends them with the rest."""
        plans = {role: self.planned_clones(role, count) for role, count in needs.items()}
        order: list[tuple[str, int]] = []
        for i in range(max((len(p) for p in plans.values()), default=0)):
            for planned in plans.values():
                if i < len(planned) and planned[i] not in order:
                    order.append(planned[i])
        warmers = []
        for executor_id, clone in order:
            state = self._states[executor_id]
            try:
                executor = self._executor_for_clone(state.spec, clone)
            except FlowdError:
                continue  # the first lease reports it
            warm = getattr(executor, "warm", None)
            if warm is not None:
                warmers.append(warm)
        if not warmers:
            return
        gate = asyncio.Semaphore(PRESTART_PARALLEL)

        async def one(warm: Callable[[Path], Awaitable[None]]) -> None:
            async with gate:
                await warm(cwd)

        for warm in warmers:
            task = asyncio.get_running_loop().create_task(one(warm))
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def warmed(self) -> None:
        """Wait until every clone `prestart` began is started (or has failed to)."""
        if self._warming:
            await asyncio.gather(*list(self._warming), return_exceptions=True)

    def planned_clones(self, role: str, count: int) -> list[tuple[str, int]]:
        """The (executor, clone) of the next `count` leases of `role` if nothing were released,
        by the same ranking as `_pick` (without `prefer`/`avoid`, which only a story knows)."""
        used = {ident: set(s.held) for ident, s in self._states.items()}
        coders = {ident: s.busy_coders for ident, s in self._states.items()}
        last = {ident: s.last_leased for ident, s in self._states.items()}
        out: list[tuple[str, int]] = []
        for tick in range(count):
            able = [
                s
                for s in self._states.values()
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
            last[ident] = self._counter + tick + 1
            out.append((ident, clone))
        return out

    def _discard(self, executor_id: str, clone: int) -> None:
        executor = self._executors.pop((executor_id, clone), None)
        if executor is not None:
            with contextlib.suppress(RuntimeError):  # no loop: nothing was ever started
                task = asyncio.get_running_loop().create_task(self._close_quietly(executor))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(executor: Executor) -> None:
        try:
            await executor.close()
        except Exception as exc:  # a dying agent may fail to close; it is gone either way
            print(f"flowd: closing an agent failed: {exc}", file=sys.stderr)

    async def aclose(self) -> None:
        """Close every agent connection the pool opened (leases are not released here)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        warming = list(self._warming)
        for task in warming:
            task.cancel()
        await asyncio.gather(*warming, return_exceptions=True)
        executors = list(self._executors.values())
        self._executors.clear()
        await asyncio.gather(*(self._close_quietly(e) for e in executors))
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    # --- calls -----------------------------------------------------------------------------------

    async def run(
        self,
        role: str,
        request: TurnRequest,
        *,
        label: str | None = None,
        prefer: str | None = None,
        observe: TurnObserver | None = None,
        avoid: frozenset[str] = frozenset(),
        prefer_not: frozenset[str] = frozenset(),
    ) -> tuple[TurnResult, LeaseInfo]:
        """Lease, run one turn, release. A failure that excluded the executor moves the call once."""
        lease = await self.lease(role, label=label, prefer=prefer, avoid=avoid, prefer_not=prefer_not)
        moved = False
        while True:
            try:
                result = await lease.executor.run_turn(request, observe)
            except AgentError as error:
                excluded = self.fail(lease, error)
                self.release(lease)
                if after_fault("leased", error.kind, excluded=excluded, retried=moved) is None:
                    raise
                moved = True
                failed = lease
                lease = await self._replacement(role, failed, avoid, prefer_not)
                self._handed_over(failed, lease, error)
                continue
            except BaseException:
                self.release(lease)
                raise
            self.succeeded(lease)
            self.release(lease)
            return result, lease.info

    async def hand_over(self, lease: Lease, error: AgentError) -> Lease:
        """Move a held coder off a failed executor: a new lease elsewhere, the old one released.

        Records the failure (unless `fail` already did for this error). When no other executor can
        ever serve, the same executor is leased again once its exclusion ends.
        """
        self.fail(lease, error)
        avoid = frozenset({lease.executor_id})
        if self.can_ever_serve(lease.role, avoid=avoid):
            new = await self.lease(lease.role, label=lease.label, avoid=avoid)
            self._handed_over(lease, new, error)
            self.release(lease)
            return new
        self.release(lease)
        new = await self.lease(lease.role, label=lease.label)
        self._handed_over(lease, new, error)
        return new

    async def _replacement(
        self, role: str, failed: Lease, avoid: frozenset[str], prefer_not: frozenset[str]
    ) -> Lease:
        wider = avoid | {failed.executor_id}
        if self.can_ever_serve(role, avoid=wider):
            return await self.lease(role, label=failed.label, avoid=wider, prefer_not=prefer_not)
        return await self.lease(role, label=failed.label, avoid=avoid, prefer_not=prefer_not)

    def _handed_over(self, old: Lease, new: Lease, error: AgentError) -> None:
        state = self._states[old.executor_id]
        reason = state.exclusion.describe() if state.exclusion is not None else str(error)
        wire = {"from": old.executor_id, "to": new.executor_id, "role": old.role, "reason": reason}
        self._emit(ExecutorHandedOver.model_validate({**wire, "label": old.label}))

    # --- views -----------------------------------------------------------------------------------

    def free_slots(self, role: str) -> int:
        """Slots free for the role now on executors not excluded."""
        self._expire()
        return sum(s.free_for(role) for s in self._states.values() if s.exclusion is None)

    def total_slots(self, role: str) -> int:
        """Slots configured for the role, exclusions aside (coder: the coder slots)."""
        return sum(
            (s.spec.coder_capacity if role == "coder" else s.spec.slots)
            for s in self._states.values()
            if role in s.spec.roles
        )

    def snapshot(self) -> RosterView:
        self._expire()
        views = []
        for s in self._states.values():
            x = s.exclusion
            views.append(
                ExecutorView(
                    id=s.spec.id,
                    kind=s.spec.kind,
                    model=s.spec.model,
                    roles=list(s.spec.roles),
                    slots=s.spec.slots,
                    coder_slots=s.spec.coder_capacity,
                    held=[HeldClone(clone=n, role=h.role, label=h.label) for n, h in sorted(s.held.items())],
                    excluded=None
                    if x is None
                    else ExclusionView(kind=x.kind, reason=x.reason, until=iso(x.until) if x.until else None),
                )
            )
        return RosterView(executors=views, sources=list(self._roster.sources))
