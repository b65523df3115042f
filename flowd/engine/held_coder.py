"""A story's coder: one clone of the roster held for the whole story, its turns, and the hand-over
to another executor when the clone's executor fails (docs/roster.md); the context lends it for a
planner, reviewer or judge turn no free slot can take (`RunContext.ask`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from flowd.agents.base import AgentError, TurnRequest, TurnResult
from flowd.engine.context import RunContext
from flowd.events.model import ExecutorLeased, ExecutorReleased
from flowd.roster.leasing import Lease
from flowd.roster.state import after_fault


@dataclass
class HeldCoder:
    """A story's coder: one clone held for the whole story, handed over when its executor fails."""

    ctx: RunContext
    lane: str
    lease: Lease
    chain: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.chain.append(self.lease.executor_id)
        self.ctx.holders[self.lane] = self

    async def borrowed_turn(self, request: TurnRequest) -> TurnResult:
        """A planner/reviewer/judge turn on this story's own coder clone (no slot was free).

        An executor fault does not end it: like a leased call it waits for the executor to come
        back (the clone is the only one it can use) and asks once more; an executor out for the
        run halts (`NoExecutor`, exit 3), as docs/roster.md says.
        """
        retried = False
        while True:
            lease, role = self.lease, request.role
            try:
                result = await self._borrow_once(lease, request)
            except AgentError as error:
                excluded = self.ctx.pool.fail(lease, error)
                if after_fault("borrowed", error.kind, excluded=excluded, retried=retried) is None:
                    raise
                retried = True
                await self.ctx.pool.wait_back(lease.executor_id, role)
                continue
            self.ctx.pool.succeeded(lease)
            self.ctx.record_turn(request, result, lease.info, lane=self.lane, coder_clone=False)
            return result

    async def _borrow_once(self, lease: Lease, request: TurnRequest) -> TurnResult:
        role = request.role
        self.ctx.emit(ExecutorLeased(executor=lease.executor_id, role=role, label=self.lane, borrowed=True))
        try:
            return await lease.executor.run_turn(request, self.ctx.observer(self.lane, lease.executor_id))
        finally:
            self.ctx.emit(
                ExecutorReleased(executor=lease.executor_id, role=role, label=self.lane, borrowed=True)
            )

    async def turn(self, request: TurnRequest) -> TurnResult:
        async with self.ctx.step(self.lane, request.cwd):
            return await self._turn(request)

    async def _turn(self, request: TurnRequest) -> TurnResult:
        handed_over = False
        while True:
            lease = self.lease
            try:
                result = await lease.executor.run_turn(
                    request, self.ctx.observer(self.lane, lease.executor_id)
                )
            except AgentError as error:
                excluded = self.ctx.pool.fail(lease, error)
                if after_fault("held", error.kind, excluded=excluded, retried=handed_over) is None:
                    raise
                self.lease = await self.ctx.pool.hand_over(lease, error)
                self.chain.append(self.lease.executor_id)
                handed_over = True
                continue
            self.ctx.pool.succeeded(lease)
            self.ctx.record_turn(request, result, lease.info, lane=self.lane, coder_clone=True)
            return result

    def release(self) -> None:
        self.ctx.pool.release(self.lease)
        if self.ctx.holders.get(self.lane) is self:
            del self.ctx.holders[self.lane]
