"""Where story lanes run (docs/scale-out.md): the seam between the scheduler and a story's pipeline.

The scheduler's shell asks a `Lanes` engine to run one story and gets its outcome; the story's
events reach the run's trace through `ctx.emit` either way. `local` (the default) runs the
pipeline in this process, as flowd always did; `ray` (`flowd/engine/lanes/ray_lanes.py`) places
each lane on a Ray cluster and merges what it pushed.
"""

from __future__ import annotations

from typing import Protocol

from flowd.engine.context import RunContext
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.story import StoryRun


class Lanes(Protocol):
    async def run(self, story: str) -> StoryOutcome:
        """Run one story to its outcome (merged, failed, waiting); cancellable."""
        ...

    async def aclose(self) -> None:
        """Nothing placed by this engine outlives the run."""
        ...


class LocalLanes:
    """Story lanes on this machine: the pipeline in this process, agents as its children."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def run(self, story: str) -> StoryOutcome:
        return await StoryRun(self.ctx, self.ctx.plan.require(story)).run()

    async def aclose(self) -> None:
        return None


async def open_lanes(ctx: RunContext, prestart: int = 0) -> Lanes:
    """The engine `[lanes] engine` names; a cluster that cannot be reached halts the run here.
    `prestart`: how many lanes start at once first (a Ray cluster warms that many agent clones)."""
    if ctx.settings.lanes.engine == "ray":
        from flowd.engine.lanes.ray_lanes import RayLanes

        return await RayLanes.connect(ctx, prestart)
    return LocalLanes(ctx)
