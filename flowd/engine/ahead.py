"""A dependent's lane made ahead of its launch (docs/performance.md "A dependent's lane made
ahead"). When a story's tasks are done (its judge and merge next; unless it then waits for a
person's approval) or it enters the merge train, and a dependent needs nothing else to be ready
(the scheduler's `MakeAhead`), that dependent's branch and worktree are made at the epic's green
head from a free spare, and its planner's agent is started confined to that worktree (its
coder's starts when it leases it, while it plans). Nothing is recorded and nothing is said: the
story is not started. When its dependencies land it launches as any story does; its `prepare`
finds the worktree at its place and resets it there (only what the merges since changed is
written), and its first turn finds its agent running: 0.35-1.5 s of a real agent's start off the
critical chain.

A lane made ahead whose story never launched (a dependency failed) is given back when the run ends;
a run killed meanwhile leaves a branch with no state, which the next run discards as any such
(engine/core/resume.py).
"""

from __future__ import annotations

import asyncio
import os

from flowd.engine.bootstrap import include_path
from flowd.engine.context import RunContext
from flowd.engine.state import load_state


async def make_ahead(ctx: RunContext, story: str) -> None:
    """Make `story`'s lane ahead when a spare is free and nothing of the story exists yet. Not
    under the merge lock, which the landing it waits for needs: the epic's branch moves only when
    the train lands a green candidate, so its head, read once, is a green commit. The story's
    `prepare` waits until this is over (`placing_ahead`)."""
    if ctx.spares is None or story in ctx.placing_ahead:
        return
    placed = ctx.placing_ahead[story] = asyncio.Event()
    try:
        made = await asyncio.to_thread(_place, ctx, story)
    finally:
        placed.set()
    if made:
        ctx.pool.warm_ahead("planner", label=story, cwd=ctx.story_worktree(story))


def _place(ctx: RunContext, story: str) -> bool:
    wt, branch = ctx.story_worktree(story), ctx.story_branch(story)
    spares = ctx.spares
    if spares is None or load_state(ctx.paths, story) is not None or os.path.lexists(wt):
        return False  # started meanwhile, or something is at its place: the launch decides
    if ctx.repo.branch_exists(branch):
        return False
    start = ctx.repo.head(ctx.epic_branch)
    cone = ctx.cone(story, start)
    if not spares.take_free(wt, branch, start, include_path(ctx.repo, ctx.settings), cone):
        return False
    ctx.made_ahead.add(story)
    return True


async def give_back_unused(ctx: RunContext) -> None:
    """The run ends: the lanes made ahead whose story never started (no state saved) go back to the
    pool of spares, their agents stopped first and their branches deleted."""
    for story in sorted(ctx.made_ahead):
        wt = ctx.story_worktree(story)
        if ctx.spares is None or load_state(ctx.paths, story) is not None or not wt.is_dir():
            continue
        await ctx.pool.leave_lane(wt)
        await asyncio.to_thread(ctx.spares.give, wt, ctx.story_branch(story), force=True)
