"""A story's way into the epic and out of its worktree (docs/architecture.md "One story",
docs/merging.md): catching up with the epic, repairing the perimeter, merging through the merge
train, cleaning up the worktree, and undoing a merge a killed run left before its gates passed.
Plain functions over a `StoryRun`'s state (engine/story.py, the pipeline).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from flowd.base.errors import FlowdError
from flowd.engine.context import RunContext
from flowd.engine.core.stops import StoryFailed
from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.state import EpicPaths, StoryState, append_findings, clear_intent, load_intent, load_state
from flowd.engine.train import Ejected
from flowd.events.model import Event, Info, MergeRolledBack, PerimeterViolation
from flowd.plan.model import Story
from flowd.plan.perimeter import classify
from flowd.vcs.gitops import Repo


class StoryRun(Protocol):
    """What these steps read and set of a story's run (`engine/story.py`'s `StoryRun`)."""

    ctx: RunContext
    story: Story
    branch: str
    worktree: Path
    state: StoryState | None
    resumed_from: str | None

    def info(self, message: str) -> None: ...


def catch_up(run: StoryRun) -> None:
    ctx, repo = run.ctx, run.ctx.repo
    if repo.is_ancestor(ctx.epic_branch, run.branch):
        return
    if repo.is_dirty(run.worktree):
        repo.commit_all(run.worktree, f"{run.story.id}: work in progress")
    message = f"{run.story.id}: catch up with {ctx.epic_branch}"
    result = repo.merge(run.worktree, ctx.epic_branch, message)
    if not result.ok:
        # The epic holds other stories' paths: there the epic's side wins. A conflict on the
        # story's own paths means someone changed them on the epic outside flowd: never
        # overwrite either side silently.
        own = [p for p in result.conflicts if not classify([p], run.story.id, ctx.plan)]
        if own:
            raise StoryFailed(
                f"catching up with {ctx.epic_branch} conflicted on paths story '{run.story.id}' owns "
                f"({', '.join(own)}): they were changed on {ctx.epic_branch} outside flowd since the "
                "story started; reconcile them on the story branch or the epic, then run again"
            )
        result = repo.merge(run.worktree, ctx.epic_branch, message, prefer_incoming=True)
    if not result.ok:
        raise StoryFailed(f"catching up with {ctx.epic_branch} conflicted: {', '.join(result.conflicts)}")
    run.info(f"caught up with {ctx.epic_branch}")


def repair_perimeter(run: StoryRun) -> str | None:
    """Put back what is still outside the story's perimeter; returns what was done, for the report.

    Whoever wrote those paths (the agent, a tool, the user editing the worktree by hand), the
    repair reverts them, so it is never silent: an event (the editor shows it), a line in the
    story's findings and its note in the report.
    """
    ctx, repo, story = run.ctx, run.ctx.repo, run.story.id
    repo.commit_remaining(run.worktree, f"{story}: remaining changes")
    strays = perimeter_now(repo, ctx.plan, story, run.worktree)
    if not strays:
        return None
    repo.restore_paths(run.worktree, [p.path for p in strays], ctx.epic_branch)
    repo.commit_all(run.worktree, f"{story}: put paths outside the perimeter back")
    ctx.emit(PerimeterViolation(lane=story, paths=strays, action="restored"))
    listed = ", ".join(f"{p.path} ({p.kind})" for p in strays)
    done = (
        f"perimeter repair restored {len(strays)} path(s) outside the story's perimeter "
        f"from {ctx.epic_branch}, undoing their changes: {listed}"
    )
    run.info(done)
    with contextlib.suppress(OSError):
        append_findings(ctx.paths, story, f"## Perimeter repair\n\n{done}")
    left = perimeter_now(repo, ctx.plan, story, run.worktree)
    if left:
        ctx.emit(PerimeterViolation(lane=story, paths=left, action="failed"))
        raise StoryFailed(
            f"story '{story}' changed paths outside its perimeter that could not be put back: "
            + ", ".join(f"{p.path} ({p.kind})" for p in left)
        )
    return done


async def merge(run: StoryRun) -> str:
    """Ready to merge: into the merge train (engine/train.py, docs/merging.md), which lands the
    story behind the epic gates (its merge commit) or sends it back (`RedMerge`). A story that
    conflicts with the stories ahead of it catches up with the epic and enters again, twice at
    most."""
    ctx, story = run.ctx, run.story.id
    if ctx.detect is not None:
        # What another lane put in the epic worktree is put back and blamed on that lane, and
        # a story blamed for an escape (the user's checkout scanned after its last step
        # included) fails here rather than merge (docs/sandbox-detection.md).
        await asyncio.to_thread(ctx.detect.check_epic_worktree)
        await ctx.detect.seen(story)
    for attempt in range(3):
        try:
            commit = await ctx.merge_train().merge(story, run.branch)
        except Ejected as ejected:
            if attempt == 2:
                raise StoryFailed(
                    f"merging {run.branch} into {ctx.epic_branch} conflicted: {ejected.detail}"
                ) from None
            run.info(f"its merge conflicted with stories merged ahead of it ({ejected.detail}); catching up")
            async with ctx.merge_lock:
                await asyncio.to_thread(catch_up, run)
            continue
        run.state = load_state(ctx.paths, story) or run.state
        return commit
    raise AssertionError("unreachable")


def clean_up_at(run: StoryRun, worktree: Path) -> None:
    repo = run.ctx.repo
    if run.ctx.spares is not None and (worktree / ".git").is_file():
        kept = run.ctx.spares.give(worktree)
        if kept is None:
            return
        # Not a spare: what a removal decides (a killed one's leftovers go, work stays).
    try:
        repo.worktree_remove(worktree)
    except FlowdError as exc:
        try:
            dirty = repo.status_paths(worktree)
        except FlowdError:
            dirty = []
        # Only tracked files missing: a removal killed half-way, nothing of anyone's to keep.
        if not dirty or any((worktree / p).exists() or (worktree / p).is_symlink() for p in dirty):
            run.info(f"kept its worktree: {exc}")
            return
        try:
            repo.worktree_remove(worktree, force=True)
        except FlowdError as again:
            run.info(f"kept its worktree: {again}")
            return
    if worktree.exists() and not (worktree / ".git").exists():
        # What a killed removal left of a merged story's worktree: no longer a checkout.
        shutil.rmtree(worktree, ignore_errors=True)


def undo_interrupted_merge(
    repo: Repo, paths: EpicPaths, epic_wt: Path, emit: Callable[[Event], object]
) -> None:
    """Undo a merge a killed run left on the epic before its gates passed; call with the epic lock held.

    The story itself is untouched (its state says `started` or `failed`), so it resumes and merges
    again, behind the gates this time. A merge the story state already records is kept; an epic
    that moved on since (a user's commit on top) is left alone and said so. An `index.lock` a git
    killed mid-command left in the epic worktree is removed first.
    """
    if (epic_wt / ".git").exists():
        stale = repo.clear_stale_locks(epic_wt)
        if stale:
            said = ", ".join(map(str, stale))
            emit(Info(message=f"removed {said}, left by a git command the previous run was killed in"))
    intent = load_intent(paths)
    if intent is None:
        return
    if not (epic_wt / ".git").exists():
        clear_intent(paths)
        return
    state = load_state(paths, intent.story)
    story = intent.story
    if state is not None and state.status == "merged":
        clear_intent(paths)
        return
    head = repo.head_of(epic_wt)
    story_head = repo.rev_parse(intent.branch)
    ours = (
        head != intent.checkpoint
        and repo.rev_parse(f"{head}^1") == intent.checkpoint
        and story_head is not None
        and repo.rev_parse(f"{head}^2") == story_head
    )
    if ours or (head == intent.checkpoint and repo.merge_in_progress(epic_wt)):
        repo.reset_hard(epic_wt, intent.checkpoint)
        reason = (
            f"the previous run stopped before the epic gates passed on story '{story}''s merge; "
            "merge undone, the story merges again when it finishes"
        )
        if ours:
            emit(MergeRolledBack(lane=story, reason=reason))
        emit(Info(lane=story, message=reason))
    elif head != intent.checkpoint:
        emit(
            Info(
                lane=story,
                message=f"the previous run stopped while merging story '{story}', and {epic_wt} has moved on "
                "since; its head is kept as it is",
            )
        )
    clear_intent(paths)
