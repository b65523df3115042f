"""The executor pool of a run: leases, the clones' agent connections, and the calls made on
them (a call moved off an executor that failed, a coder handed over).

The parts: the leasing rules (`leasing.py`: who holds what, which executor a lease takes),
exclusions and their timer (`exclusions.py`), warm-up (`warmup.py`), the wire view (`views.py`).
When nothing is free a lease waits for a release or an exclusion's end; when nothing can ever
serve the role it fails with `NoExecutor` (exit 3).

All bookkeeping is synchronous and runs on the event loop, so no lock is needed: the only await
in `lease` is the wait for a change, and a cancelled wait has taken nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from flowd.agents.base import AgentError, Executor, LateUsage, TurnObserver, TurnRequest, TurnResult
from flowd.agents.factory import make_executor
from flowd.agents.usage import wire_usage
from flowd.base.errors import FlowdError, NoExecutor
from flowd.base.timeutil import now as utc_now
from flowd.events.model import Event, ExecutorHandedOver, ExecutorLeased, ExecutorReleased, TokensUsed
from flowd.roster import leasing
from flowd.roster.exclusions import ExclusionBook
from flowd.roster.leasing import ExecutorState, Lease, LeaseInfo
from flowd.roster.state import ExclusionPolicy, Health, after_fault
from flowd.roster.views import RosterView, roster_view
from flowd.roster.warmup import Warmup, prestart_order
from flowd.store.config import ExecutorSpec, Roster

# Failures after which a clone's agent process is not trusted again: it is closed and respawned.
DISCARD_ON = frozenset({"crash", "stall", "unavailable", "auth", "timeout"})


class ExecutorFactory(Protocol):
    def __call__(self, spec: ExecutorSpec, *, clone: int, log_dir: Path | None = None) -> Executor: ...


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
        lane_bound: bool = False,
    ) -> None:
        self._roster = roster
        # Each agent process serves one lane for life (an enforcing sandbox): clones keep to lanes.
        self._lane_bound = lane_bound
        self._emit = emit
        self._factory = executor_factory
        self._log_dir = log_dir
        self._states = {spec.id: ExecutorState(spec, i) for i, spec in enumerate(roster.executors)}
        self._counter = 0
        self._ended: set[str] = set()  # labels of lanes that ended (`lane_ended`)
        self._ahead: dict[tuple[str, str], str] = {}  # (lane, role) → the executor warmed for it
        self._executors: dict[tuple[str, int], Executor] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._warmup = Warmup()
        self._book = ExclusionBook(
            self._states, state_path=state_path, emit=emit, clock=clock, policy=policy or ExclusionPolicy()
        )

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
        lease = await self._lease(role, label, prefer, avoid, prefer_not, give_up=None)
        assert lease is not None  # only a `give_up` ends the wait without one
        return lease

    async def lease_unless_coders_hold(
        self, role: str, *, label: str | None = None, prefer_not: frozenset[str] = frozenset()
    ) -> Lease | None:
        """A slot for `role`, or None once none is free and only stories' coders hold the slots
        that serve it: nothing brief will end, and the caller borrows its story's own coder clone
        instead (engine/held_coder.py). Checked at every change while it waits, not only at the
        start: a coder that takes the last slot while this waits must not leave it waiting for
        that coder's whole story."""
        # The executor `warm_ahead` started an agent on for this turn, where priorities allow.
        prefer = self._ahead.pop((label, role), None) if label is not None else None
        return await self._lease(
            role, label, prefer, frozenset(), prefer_not, give_up=lambda: self.coders_hold_all(role)
        )

    async def _lease(
        self,
        role: str,
        label: str | None,
        prefer: str | None,
        avoid: frozenset[str],
        prefer_not: frozenset[str],
        *,
        give_up: Callable[[], bool] | None,
    ) -> Lease | None:
        while True:
            self._book.expire()
            state = leasing.pick(self._states.values(), role, prefer, avoid, prefer_not)
            if state is not None:
                return self._take(state, role, label)
            if not self.can_ever_serve(role, avoid=avoid):
                raise NoExecutor(role, self._hopeless(role, avoid))
            if give_up is not None and give_up():
                return None
            changed = self._book.changed
            self._book.arm_timer()
            await changed.wait()

    def coders_hold_all(self, role: str) -> bool:
        """No slot for `role` is free, and only stories' coders hold the slots that serve it."""
        return leasing.coders_hold_all(self._states.values(), role)

    async def wait_back(self, executor_id: str, role: str) -> None:
        """Wait until `executor_id` is no longer excluded (a borrowed turn's executor is the only
        one it can use); `NoExecutor` when it is out for the run."""
        state = self._states[executor_id]
        while True:
            self._book.expire()
            if state.exclusion is None:
                return
            if state.exclusion.kind == "run":
                raise NoExecutor(role, self._hopeless(role, frozenset()))
            changed = self._book.changed
            self._book.arm_timer()
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
        self._book.expire()
        state = leasing.pick(self._states.values(), role, prefer, avoid, prefer_not)
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
        self._book.signal()

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

    def _take(self, state: ExecutorState, role: str, label: str | None) -> Lease:
        clone = leasing.pick_clone(state, label, lane_bound=self._lane_bound, ended=self._ended)
        self._counter += 1
        state.last_leased = self._counter
        state.served[clone] = (label, self._counter)
        lease = Lease(state.spec.id, clone, role, label, state.spec, self)
        state.held[clone] = lease
        self._emit(ExecutorLeased(executor=state.spec.id, clone=clone, role=role, label=label))
        return lease

    def lane_started(self, label: str) -> None:
        """The lane `label` runs (again): its clones are its own (`pick_clone`)."""
        self._ended.discard(label)

    def lane_ended(self, label: str) -> None:
        """The lane `label` ended (merged, failed, paused): its clones are the first a new lane
        takes, before a running lane's (`pick_clone`), and a warm start it never used is forgotten."""
        self._ended.add(label)
        for key in [key for key in self._ahead if key[0] == label]:
            del self._ahead[key]

    def can_ever_serve(self, role: str, *, avoid: frozenset[str] = frozenset()) -> bool:
        """Some executor outside `avoid` serves the role and is not excluded for the run."""
        return leasing.can_ever_serve(self._states.values(), role, avoid)

    def _hopeless(self, role: str, avoid: frozenset[str]) -> str:
        return leasing.hopeless(self._states.values(), role, avoid, self._roster.described)

    # --- exclusions ------------------------------------------------------------------------------

    def fail(self, lease: Lease, error: AgentError) -> bool:
        """Record a failed call on the lease's executor; True if the executor is now excluded."""
        state = self._states[lease.executor_id]
        if lease._reported is not error:
            lease._reported = error
            if error.kind in DISCARD_ON:
                self._discard(lease.executor_id, lease.clone)
            self._book.record(state, error)
        return state.exclusion is not None

    def succeeded(self, lease: Lease) -> None:
        """A call worked: forget the executor's back-off and rate-limit history."""
        state = self._states[lease.executor_id]
        state.health = Health()

    def readmit(self) -> list[str]:
        """Take back every executor excluded for the run (an answer `wait` to a `noExecutor`
        pause: the person fixed what was wrong, docs/answers.md); their ids."""
        return self._book.readmit()

    # --- executors -------------------------------------------------------------------------------

    def _executor_for(self, lease: Lease) -> Executor:
        return self._executor_for_clone(lease.spec, lease.clone)

    def _executor_for_clone(self, spec: ExecutorSpec, clone: int) -> Executor:
        key = (spec.id, clone)
        executor = self._executors.get(key)
        if executor is None:
            executor = self._factory(spec, clone=clone, log_dir=self._log_dir)
            self._executors[key] = executor
            bill_late_to = getattr(executor, "bill_late_to", None)
            if callable(bill_late_to):
                bill_late_to(lambda late: self._bill_late(spec, clone, late))
        return executor

    def _bill_late(self, spec: ExecutorSpec, clone: int, late: LateUsage) -> None:
        """Usage an agent reported after its turn (a side request that finished late): billed
        like the turn that caused it, to its lane and role, on the clone when it was the lane's
        coder (docs/roster.md "Side requests"). A cause without a story bills the run."""
        cause = late.cause
        for usage in late.usage:
            self._emit(
                TokensUsed(
                    lane=cause.meta.story,
                    executor=spec.id,
                    clone=clone if cause.role == "coder" and cause.meta.story is not None else None,
                    agent=cause.role,
                    model=usage.model or spec.model,
                    usage=wire_usage(usage),
                )
            )

    async def leave_lane(self, worktree: Path) -> None:
        """Stop every idle agent process confined to the lane worktree `worktree`, which another
        lane takes next (docs/repositories.md "Worktree reuse"); a held clone is left alone. The
        processes (a story's coder and its helper) stop side by side: the story's dependents
        launch after this (docs/performance.md "Between the turns")."""
        leaving = []
        for (executor_id, clone), executor in list(self._executors.items()):
            state = self._states.get(executor_id)
            leave = getattr(executor, "leave_lane", None)
            if leave is None or (state is not None and clone in state.held):
                continue
            leaving.append(leave(worktree))
        await asyncio.gather(*leaving, return_exceptions=True)  # a failed stop: gone either way

    def prestart(self, needs: dict[str, int], cwd: Path) -> None:
        """Start, in the background, the agent processes of the clones that the first leases of
        each role will take (`needs`: role → how many leases are expected at once), so a story's
        first turns do not wait for an agent to start (docs/performance.md: throughput).

        The clones are the ones `lease` would pick (priority, then round robin, roster order),
        planned without taking anything; roles are interleaved so the first story's agents start
        first, and they take the run's agent start slots (`acp_process.start_slot`) in that order.
        Kinds without a `warm` (CLI and OpenAI executors start nothing ahead) are skipped; the
        executors are the clones' own, so `aclose` ends them with the rest."""
        plans = {role: self.planned_clones(role, count) for role, count in needs.items()}
        executors = []
        for executor_id, clone in prestart_order(plans):
            state = self._states[executor_id]
            try:
                executors.append(self._executor_for_clone(state.spec, clone))
            except FlowdError:
                continue  # the first lease reports it
        self._warmup.start(executors, cwd)

    def warm_for(self, lease: Lease, cwd: Path) -> None:
        """Start the leased clone's agent process for the lane of `cwd` in the background, so the
        lane's first turn on it finds it running (docs/performance.md: throughput)."""
        try:
            executor = lease.executor
        except FlowdError:
            return  # the turn reports it
        self._warmup.start([executor], cwd)

    def warm_ahead(self, role: str, *, label: str, cwd: Path) -> None:
        """Start, in the background, the agent process of the clone the next lease of `role` for
        the lane `label` would take, so that turn (a story's planner, asked once its worktree is
        bootstrapped) does not wait for an agent to start (docs/performance.md "Between the
        turns"). Nothing is leased, but that turn's lease prefers the executor (whatever other
        leases did to the round robin meanwhile; never over a better priority). Where a process
        serves one lane for life, the clone counts as the lane's from now on (`pick_clone`: the
        lane's next lease takes it, other lanes take it last), and a clone another running lane's
        process holds is left alone."""
        self._book.expire()
        target = leasing.clone_to_warm(
            self._states.values(), role, label, lane_bound=self._lane_bound, ended=self._ended
        )
        if target is None:
            return
        state, clone = target
        if self._lane_bound:
            state.served[clone] = (label, self._counter)  # the lane's from now on
        try:
            executor = self._executor_for_clone(state.spec, clone)
        except FlowdError:
            return  # the lease reports it
        self._ahead[(label, role)] = state.spec.id
        self._warmup.start([executor], cwd)

    async def warmed(self) -> None:
        """Wait until every clone `prestart` began is started (or has failed to)."""
        await self._warmup.wait()

    def planned_clones(self, role: str, count: int) -> list[tuple[str, int]]:
        """The (executor, clone) of the next `count` leases of `role` if nothing were released."""
        return leasing.planned_clones(self._states, role, count, self._counter)

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
        self._book.close()
        await self._warmup.cancel()
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
        leased: Lease | None = None,
    ) -> tuple[TurnResult, LeaseInfo]:
        """Lease (unless `leased` is one taken already), run one turn, release. A failure that
        excluded the executor moves the call once."""
        lease = leased or await self.lease(
            role, label=label, prefer=prefer, avoid=avoid, prefer_not=prefer_not
        )
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
        self._book.expire()
        return sum(s.free_for(role) for s in self._states.values() if s.exclusion is None)

    def total_slots(self, role: str) -> int:
        """Slots configured for the role, exclusions aside (coder: the coder slots)."""
        return sum(
            (s.spec.coder_capacity if role == "coder" else s.spec.slots)
            for s in self._states.values()
            if role in s.spec.roles
        )

    def snapshot(self) -> RosterView:
        self._book.expire()
        return roster_view(self._states.values(), self._roster.sources)
