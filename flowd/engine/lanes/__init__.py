"""Where story lanes run (docs/scale-out.md): the placement, the seam between the scheduler and a
story's pipeline.

The scheduler's shell asks a `Placement` to run one story and gets its outcome; the story's
events reach the run's trace through `ctx.emit` either way. `local` (the default) runs the
pipeline in this process, as flowd always did; `ray` (`flowd/engine/lanes/ray_lanes.py`) places
each lane on a Ray cluster and merges what it pushed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

from flowd.engine.ahead import give_back_unused, make_ahead
from flowd.engine.context import RunContext
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.story import StoryRun
from flowd.events.model import Info


class Placement(Protocol):
    async def run(self, story: str) -> StoryOutcome:
        """Run one story to its outcome (merged, failed, waiting); cancellable."""
        ...

    def make_ahead(self, story: str) -> None:
        """Prepare `story`'s lane ahead of its launch, in the background (engine/ahead.py)."""
        ...

    async def aclose(self) -> None:
        """Nothing this placement started outlives the run."""
        ...


class LocalPlacement:
    """Story lanes on this machine: the pipeline in this process, agents as its children."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self._later: set[asyncio.Future[None]] = set()

    async def run(self, story: str) -> StoryOutcome:
        return await StoryRun(self.ctx, self.ctx.plan.require(story), later=self._run_later).run()

    def make_ahead(self, story: str) -> None:
        self._run_later(functools.partial(make_ahead, self.ctx, story))

    def _run_later(self, work: Callable[[], Awaitable[None]]) -> None:
        """A merged story's lane ending, off its dependents' way (docs/performance.md: throughput)."""
        task = asyncio.ensure_future(work())
        self._later.add(task)
        task.add_done_callback(self._done_later)

    def _done_later(self, task: asyncio.Future[None]) -> None:
        self._later.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.ctx.emit(Info(message=f"a lane's work off the critical chain failed: {task.exception()}"))

    async def aclose(self) -> None:
        if self._later:
            await asyncio.gather(*list(self._later), return_exceptions=True)
        try:
            await give_back_unused(self.ctx)
        except Exception as exc:  # a spare is only a shortcut: said, not raised
            self.ctx.emit(Info(message=f"a lane made ahead could not be given back: {exc}"))


async def open_placement(ctx: RunContext, prestart: int = 0) -> Placement:
    """The placement `[lanes] engine` names; a cluster that cannot be reached halts the run here.
    `prestart`: how many lanes start at once first (a Ray cluster warms that many agent clones)."""
    if ctx.settings.lanes.engine == "ray":
        from flowd.engine.lanes.ray_lanes import RayPlacement

        return await RayPlacement.connect(ctx, prestart)
    return LocalPlacement(ctx)
