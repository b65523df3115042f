"""Warm-up (docs/performance.md: throughput): the agent processes of the clones the first leases
will take, started in the background before a story's first turn needs them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flowd.agents.base import Executor


def prestart_order(plans: dict[str, list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The planned clones of every role (role → the clones its next leases take), interleaved so
    the first story's agents start first, each clone once."""
    order: list[tuple[str, int]] = []
    for i in range(max((len(p) for p in plans.values()), default=0)):
        for planned in plans.values():
            if i < len(planned) and planned[i] not in order:
                order.append(planned[i])
    return order


class Warmup:
    """The warm starts in flight. They are begun in the order given and take the run's agent start
    slots (`acp_process.start_slot`) in that order, with every other start of the run."""

    def __init__(self) -> None:
        self._warming: set[asyncio.Task[None]] = set()

    def start(self, executors: list[Executor], cwd: Path) -> None:
        """Warm each executor that can start ahead (`warm`); CLI and OpenAI executors cannot."""
        warmers = []
        for executor in executors:
            warm = getattr(executor, "warm", None)
            if warm is not None:
                warmers.append(warm)
        if not warmers:
            return
        for warm in warmers:
            task = asyncio.get_running_loop().create_task(warm(cwd))
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def wait(self) -> None:
        """Until every warm start begun is done (or has failed)."""
        if self._warming:
            await asyncio.gather(*list(self._warming), return_exceptions=True)

    async def cancel(self) -> None:
        warming = list(self._warming)
        for task in warming:
            task.cancel()
        await asyncio.gather(*warming, return_exceptions=True)
