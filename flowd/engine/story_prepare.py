"""A story's worktree made ready (docs/architecture.md "One story"): started fresh or resumed by the
story hash (the decision is engine/core/resume.py's; this does the git work), a stale one discarded,
then bootstrapped (the user's ignored files, the lane's ports) and set up. Plain functions over a
`StoryRun`'s state (engine/story.py, the pipeline).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.engine.bootstrap import describe_prepared, include_path, prepare_lane
from flowd.engine.core.resume import OnFreshBranch, OnState, merged_before_stop, on_fresh_branch, on_state
from flowd.engine.core.stops import StoryFailed
from flowd.engine.gates import run_command
from flowd.engine.state import StoryState, load_state, save_state
from flowd.engine.story_merge import StoryRun, clean_up_at
from flowd.events.model import StageCompleted, StageFailed, StageStarted, WorktreePrepared
from flowd.plan.hashing import story_hash
from flowd.vcs import sparse


def prepare(run: StoryRun) -> str | None:
    """Make the worktree ready; returns a note when the story was merged on a previous run.

    The decisions are engine/core/resume.py's; this carries them out with git."""
    ctx, story = run.ctx, run.story
    digest = story_hash(story)
    state = load_state(ctx.paths, story.id)
    decision = on_state(state, digest)
    if decision is OnState.START_OVER:
        assert state is not None
        run.info("plan entry changed since its branch was created; starting over")
        _discard(run, Path(state.worktree), state.branch)
    if decision is OnState.MERGED:
        assert state is not None
        run.state = state
        _finish_clean_up(run, Path(state.worktree))
        return "merged on a previous run"
    if decision is OnState.RESUME:
        assert state is not None
        run.resumed_from = state.status
        return _resume(run, state)
    _start(run, digest)
    return None


def _finish_clean_up(run: StoryRun, worktree: Path) -> None:
    # A runner killed between the merge and its clean-up left the worktree, or killed in the
    # middle of `git worktree remove` left git's record of it: finish the job.
    if worktree.exists():
        clean_up_at(run, worktree)
    else:
        with contextlib.suppress(FlowdError):
            run.ctx.repo.worktree_prune()


def _start(run: StoryRun, digest: str) -> None:
    ctx, repo = run.ctx, run.ctx.repo
    base = repo.head(ctx.epic_branch)
    exists = repo.branch_exists(run.branch)
    # A branch with no state: a run killed between creating it and saving its state; or made
    # ahead by this run (engine/ahead.py), its worktree reset in place below.
    ahead = run.story.id in ctx.made_ahead and (run.worktree / ".git").is_file()
    choice = on_fresh_branch(
        exists, exists and not ahead and repo.is_ancestor(run.branch, ctx.epic_branch), ahead
    )
    if choice is OnFreshBranch.DISCARD:
        _discard(run, run.worktree, run.branch)
    elif choice is OnFreshBranch.REUSE:
        run.info(f"reusing the existing branch {run.branch} (it holds work the epic lacks)")
        base = repo.rev_parse(f"{ctx.epic_branch}") or base
    if ctx.spares is not None and choice is not OnFreshBranch.REUSE:
        # A leftover at its path reset in place, else a spare's, else a new one.
        how = ctx.spares.take(
            run.worktree,
            run.branch,
            ctx.epic_branch,
            include_path(repo, ctx.settings),
            cone=ctx.cone(run.story.id, ctx.epic_branch),
            checkout=False,  # `check_out` below, once the merge lock is free
        )
        if how != "added":
            run.info(f"its worktree is a used one, reset to {ctx.epic_branch} ({how})")
    # Asked again: a discard that could not remove the branch leaves it to check out.
    elif repo.branch_exists(run.branch):
        repo.worktree_add(run.worktree, run.branch)
    else:
        repo.worktree_add(run.worktree, run.branch, start=ctx.epic_branch)
    run.state = StoryState(
        id=run.story.id,
        hash=digest,
        branch=run.branch,
        worktree=str(run.worktree),
        status="started",
        base=base,
    )
    save_state(ctx.paths, run.state)


def check_out(run: StoryRun) -> None:
    """Write the files of a worktree `prepare` added without them. The branch was made at the
    epic's head under the merge lock; its 25,000 files (a big repository's) need no lock, and
    lanes starting together check out side by side (docs/repositories.md "Worktree reuse")."""
    run.ctx.repo.check_out_if_empty(run.worktree)


def _resume(run: StoryRun, state: StoryState) -> str | None:
    ctx, repo = run.ctx, run.ctx.repo
    stored = Path(state.worktree)
    if stored != run.worktree and (stored / ".git").is_file():
        repo.worktree_move(stored, run.worktree)
        run.info(f"moved its worktree to {run.worktree}")
    repo.worktree_add(run.worktree, run.branch)
    if ctx.spares is not None:  # a local lane: its folders, as the settings say now
        sparse.apply_cone(run.worktree, ctx.cone(run.story.id, run.branch))
    stale = repo.clear_stale_locks(run.worktree)
    if stale:
        run.info(
            f"removed {', '.join(map(str, stale))}, left by a git command the previous run was killed in"
        )
    head = repo.head(run.branch)
    moved = state.base is not None and head != state.base
    if merged_before_stop(state.base, head, moved and repo.is_ancestor(run.branch, ctx.epic_branch)):
        run.state = state.model_copy(update={"status": "merged", "worktree": str(run.worktree)})
        save_state(ctx.paths, run.state)
        clean_up_at(run, run.worktree)
        return "merged before the previous run stopped"
    run.state = state.model_copy(update={"status": "started", "worktree": str(run.worktree), "reason": None})
    save_state(ctx.paths, run.state)
    run.info(f"resuming {run.branch}")
    return None


def _discard(run: StoryRun, worktree: Path, branch: str) -> None:
    paths, repo = run.ctx.paths, run.ctx.repo
    problem: str | None = None
    if run.ctx.spares is not None and worktree == run.worktree and (worktree / ".git").is_file():
        # Kept for `_start` to reset in place (a remove then add rewrites every file).
        try:
            repo.detach(worktree)
            repo.delete_branch(branch, force=True)
        except FlowdError:
            problem = repo.discard_worktree(worktree, branch)
    else:
        problem = repo.discard_worktree(worktree, branch)
    if problem is not None:
        run.info(f"could not remove the old worktree cleanly: {problem}")
    stale_answers = paths.answers(run.story.id)
    for stale in (paths.checkpoint(run.story.id), paths.state(run.story.id), stale_answers):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


async def bootstrap(run: StoryRun) -> None:
    """The user's ignored files and the lane's ports (docs/worktree-bootstrap.md), on every
    preparation: a resumed worktree gets the checkout's current files again."""
    story = run.story.id
    ports, copied = await asyncio.to_thread(prepare_lane, run.ctx, story, story, run.worktree)
    run.ctx.emit(WorktreePrepared(lane=story, copied=copied.copied, port=ports.first, ports=ports.ports))
    if copied.skipped:
        run.info(describe_prepared(ports, copied))


async def setup(run: StoryRun) -> None:
    ctx, story = run.ctx, run.story.id
    if not ctx.settings.setup:
        return
    stage = f"story {story}: setup"
    ctx.emit(StageStarted(stage=stage, lane=story))
    for number, command in enumerate(ctx.settings.setup, start=1):
        log = ctx.paths.gate_logs(story).parent / "setup" / f"{number}.log"
        async with ctx.step(story, run.worktree):
            result = await run_command(
                command,
                run.worktree,
                log=log,
                timeout_s=ctx.settings.gate_timeout_s,
                env=ctx.lane_env(story),
            )
        if not result.ok:
            ctx.emit(StageFailed(stage=stage, lane=story, error=result.describe()[:500]))
            raise StoryFailed(f"setup failed: {result.describe()}")
    ctx.emit(StageCompleted(stage=stage, lane=story))
