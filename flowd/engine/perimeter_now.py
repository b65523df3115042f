"""What a story's worktree changes outside its perimeter right now.

The one place that asks git for a story's changes and classifies them: the task loop, the
perimeter repair, `flowd check` and the language server's live diagnostics all use it, so they
always agree. Changes are taken since the merge-base with the epic branch, so what a catch-up
merge brought in from the epic (other stories' merged work) never counts against the story.
"""

from __future__ import annotations

from pathlib import Path

from flowd.events.model import PerimeterPath
from flowd.plan.model import StoryPlan
from flowd.plan.perimeter import classify
from flowd.vcs.gitcli import GitDirChanged, admin_of, unchecked_out
from flowd.vcs.gitops import Repo
from flowd.vcs.quarantine import reader_env


def perimeter_now(repo: Repo, plan: StoryPlan, story_id: str, worktree: Path) -> list[PerimeterPath]:
    """Committed (since the epic merge-base), uncommitted and untracked changes outside the story.

    A worktree whose checkout is still being written (a story's, after the merge lock,
    engine/story_prepare.py) has no index yet, and git would list every file as changed: nothing
    in it is anyone's change until the checkout ends, and no agent runs there before."""
    if unchecked_out(worktree):
        return []
    # Asked mid-turn (the language server's live diagnostics), the lane's newest commits are still
    # in its quarantine: git reads it as an alternate (docs/sandbox.md "The quarantine").
    try:
        admin = admin_of(repo.common_dir, worktree)
    except GitDirChanged:
        admin = None  # detection names it (gitDir); git reads no quarantine then
    env = reader_env(admin) if admin is not None else {}
    return classify(repo.changed_files(worktree, plan.epic_branch, env or None), story_id, plan)
