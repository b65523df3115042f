"""`flowd clean`: remove the worktrees and branches of merged stories and of forgotten epics.

Never removes a worktree with uncommitted changes or a branch holding commits its epic lacks:
it keeps them and says which and why. An epic whose run is active is left alone.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from flowd.config import load_settings
from flowd.engine.state import EpicLock, EpicPaths, all_states
from flowd.errors import FlowdError
from flowd.gitops import Repo, worktree_root
from flowd.trace import pid_alive


@dataclass
class CleanPlan:
    remove_worktrees: list[Path] = field(default_factory=list)
    delete_branches: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def plan_clean(repo: Repo) -> CleanPlan:
    """Decide what to remove (pure reading: nothing is changed here)."""
    try:
        settings = load_settings(repo.root)
        root = worktree_root(repo, settings.worktree_root)
    except FlowdError:
        root = worktree_root(repo, None)
    result = CleanPlan()
    registered = {info.path.resolve(): info for info in repo.worktrees()}
    epics_dir = repo.root / ".flow" / "epics"
    known = {p.name for p in epics_dir.iterdir() if p.is_dir()} if epics_dir.is_dir() else set()
    epic_ids = set(known) | {b.split("/")[1] for b in repo.branches("story/") if b.count("/") >= 2}
    for epic_id in sorted(epic_ids):
        paths = EpicPaths(repo.root, epic_id)
        holder = EpicLock(paths).holder()
        if holder is not None and pid_alive(holder[1]):
            result.kept.append(f"epic {epic_id}: run {holder[0]} is active")
            continue
        epic_branch = f"epic/{epic_id}"
        forgotten = epic_id not in known
        states = {s.id: s for s in all_states(paths)}
        for branch in repo.branches(f"story/{epic_id}/"):
            story_id = branch.split("/", 2)[2]
            state = states.get(story_id)
            if not forgotten and (state is None or state.status != "merged"):
                continue  # a live story: its worktree is where work resumes
            worktree = root / epic_id / story_id
            info = registered.get(worktree.resolve())
            if info is None:
                info = next((i for i in registered.values() if i.branch == branch), None)
            if info is not None and repo.status_paths(info.path):
                result.kept.append(f"{info.path}: it has uncommitted changes")
                continue
            target = epic_branch if repo.branch_exists(epic_branch) else "HEAD"
            missing = repo.unmerged_commits(branch, target)
            if missing:
                result.kept.append(f"{branch}: {missing} commit(s) that {target} lacks")
                continue
            if info is not None:
                result.remove_worktrees.append(info.path)
            result.delete_branches.append(branch)
        if forgotten:
            epic_wt = root / epic_id / "_epic"
            info = registered.get(epic_wt.resolve())
            if info is not None:
                if repo.status_paths(info.path):
                    result.kept.append(f"{info.path}: it has uncommitted changes")
                else:
                    result.remove_worktrees.append(info.path)
    return result


def apply_clean(repo: Repo, plan: CleanPlan) -> list[str]:
    problems: list[str] = []
    for path in plan.remove_worktrees:
        try:
            repo.worktree_remove(path)
        except FlowdError as exc:
            problems.append(str(exc))
    for branch in plan.delete_branches:
        try:
            repo.delete_branch(branch, force=True)
        except FlowdError as exc:
            problems.append(str(exc))
    with contextlib.suppress(FlowdError):
        repo.worktree_prune()
    return problems


def clean_command(args: argparse.Namespace) -> int:
    repo = Repo.discover(Path.cwd())
    plan = plan_clean(repo)
    verb = "would remove" if args.dry_run else "removed"
    problems = [] if args.dry_run else apply_clean(repo, plan)
    for path in plan.remove_worktrees:
        print(f"{verb} worktree {path}")
    for branch in plan.delete_branches:
        print(f"{verb.replace('remove', 'delete')} branch {branch}")
    for reason in plan.kept:
        print(f"kept {reason}")
    for problem in problems:
        print(f"could not clean: {problem}")
    if not (plan.remove_worktrees or plan.delete_branches or plan.kept):
        print("nothing to clean")
    return 0
