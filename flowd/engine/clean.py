"""`flowd clean`: remove the worktrees and branches of merged stories and of forgotten epics.

Never removes a worktree with uncommitted changes or a branch holding commits its epic lacks:
it keeps them and says which and why. An epic whose run is active is left alone.

`flowd clean --epic ID` retires a finished epic: its `_epic` worktree and its merged stories'
worktrees and branches go, `epic/<ID>` and `.flow/epics/<ID>` (state, report) stay. It refuses
(exit 2, nothing removed) while a run of the epic is alive, while a story is unmerged, and while
the epic worktree has uncommitted changes (docs/running.md).
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from flowd.base import layout
from flowd.base.errors import FlowdError, InputError
from flowd.base.layout import SPARE_DIR
from flowd.engine import epic_worktree
from flowd.engine.spares import reap, to_trash, trash_root
from flowd.engine.state import EpicLock, EpicPaths, all_states
from flowd.store.config import load_settings
from flowd.trace.log import is_active, list_runs, pid_alive
from flowd.vcs.gitops import Repo, worktree_root
from flowd.vcs.worktrees import WorktreeInfo


@dataclass
class CleanPlan:
    remove_worktrees: list[Path] = field(default_factory=list)
    delete_branches: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    # `<worktreeRoot>/<epic>` folders, and `<worktreeRoot>` itself, whose spares and trash go
    # (docs/repositories.md "Worktree reuse").
    empty_trash: list[Path] = field(default_factory=list)


def _worktrees_root(repo: Repo) -> Path:
    """Where the epics' worktrees are (the default when the config cannot be read)."""
    try:
        return worktree_root(repo, load_settings(repo.root).worktree_root)
    except FlowdError:
        return worktree_root(repo, None)


def _take_branch(
    repo: Repo,
    result: CleanPlan,
    branch: str,
    info: WorktreeInfo | None,
    target: str,
    target_exists: bool = True,
) -> None:
    """Remove a story `branch` and its worktree `info`, unless the worktree has uncommitted changes
    or the branch holds commits `target` lacks (a missing `target` lacks them all)."""
    if info is not None and repo.status_paths(info.path):
        result.kept.append(f"{info.path}: it has uncommitted changes")
        return
    missing = repo.unmerged_commits(branch, target) if target_exists else 1
    if missing:
        result.kept.append(f"{branch}: {missing} commit(s) that {target} lacks")
        return
    if info is not None:
        result.remove_worktrees.append(info.path)
    result.delete_branches.append(branch)


def plan_clean(repo: Repo) -> CleanPlan:
    """Decide what to remove (pure reading: nothing is changed here)."""
    root = _worktrees_root(repo)
    result = CleanPlan()
    registered = {info.path.resolve(): info for info in repo.worktrees()}
    epics_dir = repo.root / layout.epics_state()
    known = {p.name for p in epics_dir.iterdir() if p.is_dir()} if epics_dir.is_dir() else set()
    epic_ids = set(known) | {b.split("/")[1] for b in repo.branches("story/") if b.count("/") >= 2}
    _spares_of(root, registered, result)  # those kept between runs (`[worktree] keepSpares`)
    for epic_id in sorted(epic_ids):
        paths = EpicPaths(repo.root, epic_id)
        holder = EpicLock(paths).holder()
        if holder is not None and pid_alive(holder[1]):
            result.kept.append(f"epic {epic_id}: run {holder[0]} is active")
            continue
        _spares_of(root / epic_id, registered, result)
        epic_branch = layout.epic_branch(epic_id)
        forgotten = epic_id not in known
        states = {s.id: s for s in all_states(paths)}
        for branch in repo.branches(layout.story_branches(epic_id)):
            story_id = branch.split("/", 2)[2]
            state = states.get(story_id)
            if not forgotten and (state is None or state.status != "merged"):
                continue  # a live story: its worktree is where work resumes
            worktree = root / epic_id / story_id
            info = registered.get(worktree.resolve())
            if info is None:
                info = next((i for i in registered.values() if i.branch == branch), None)
            _take_branch(
                repo, result, branch, info, epic_branch if repo.branch_exists(epic_branch) else "HEAD"
            )
        if forgotten:
            epic_wt = layout.epic_worktree(root, epic_id)
            info = registered.get(epic_wt.resolve())
            if info is not None:
                if repo.status_paths(info.path):
                    result.kept.append(f"{info.path}: it has uncommitted changes")
                else:
                    result.remove_worktrees.append(info.path)
    return result


def _spares_of(lanes: Path, registered: dict[Path, WorktreeInfo], result: CleanPlan) -> None:
    """A run killed before its end leaves spare worktrees (detached, clean: nothing of anyone's)
    and trash, and runs keep spares for the next one (`lanes` is then the worktree root); all go."""
    spare_root = lanes / SPARE_DIR
    if spare_root.is_dir():
        for spare in sorted(spare_root.iterdir()):
            if spare.resolve() in registered:
                result.remove_worktrees.append(spare)
    if spare_root.is_dir() or trash_root(lanes).is_dir():
        result.empty_trash.append(lanes)


def retire_plan(repo: Repo, epic_id: str) -> CleanPlan:
    """What retiring `epic_id` removes; InputError (exit 2) when it must not be retired now."""
    paths = EpicPaths(repo.root, epic_id)
    epic_branch = layout.epic_branch(epic_id)
    if not paths.root.is_dir() and not repo.branch_exists(epic_branch):
        raise InputError(f"--epic {epic_id}: no such epic in {repo.root} (`flowd status` lists the runs)")
    holder = EpicLock(paths).holder()
    runs = [r for r in list_runs(repo.root) if r.epic_id == epic_id]
    alive = [r.run_id for r in runs if is_active(r)]
    if holder is not None and pid_alive(holder[1]):
        alive.insert(0, holder[0])
    if alive:
        raise InputError(
            f"--epic {epic_id}: run {alive[0]} of it is still running; "
            f"stop it (`flowd cancel {alive[0]}`) or let it finish, then clean"
        )
    states = all_states(paths)
    unfinished = [f"{s.id} ({s.status})" for s in states if s.status != "merged"]
    if runs and runs[0].outcome not in (None, "done") and not unfinished:
        unfinished.append(f"its last run {runs[0].run_id} ended {runs[0].outcome}")
    if unfinished or not states:
        what = ", ".join(unfinished) or "no story has been merged"
        raise InputError(
            f"--epic {epic_id} is not finished: {what}; run it again to finish it "
            "(`flowd clean` without --epic removes only merged stories)"
        )
    root = _worktrees_root(repo)
    registered = {info.path.resolve(): info for info in repo.worktrees()}
    result = CleanPlan()
    _spares_of(root / epic_id, registered, result)
    epic_wt = registered.get(layout.epic_worktree(root, epic_id).resolve()) or next(
        (i for i in registered.values() if i.branch == epic_branch), None
    )
    if epic_wt is not None and epic_wt.path.resolve() != repo.root.resolve():
        # One a killed run left unchecked-out holds nothing of anybody's (engine/epic_worktree.py).
        dirty = [] if epic_worktree.placeholder(epic_wt.path) else repo.status_paths(epic_wt.path)
        if dirty:
            raise InputError(
                f"--epic {epic_id}: the epic worktree {epic_wt.path} has uncommitted changes "
                f"({', '.join(dirty[:5])}); commit, move or discard them, then clean"
            )
        result.remove_worktrees.append(epic_wt.path)
    for branch in repo.branches(layout.story_branches(epic_id)):
        info = next((i for i in registered.values() if i.branch == branch), None)
        _take_branch(repo, result, branch, info, epic_branch, repo.branch_exists(epic_branch))
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
    for lanes in plan.empty_trash:
        spare_root = lanes / SPARE_DIR
        if spare_root.is_dir():
            for left in sorted(spare_root.iterdir()):  # not registered: a move killed half-way
                to_trash(lanes, left)
            with contextlib.suppress(OSError):
                spare_root.rmdir()
        reap(lanes)
    with contextlib.suppress(FlowdError):
        repo.worktree_prune()
    return problems


def clean_command(args: argparse.Namespace) -> int:
    repo = Repo.discover(Path.cwd())
    epic_id: str | None = getattr(args, "epic", None)
    plan = retire_plan(repo, epic_id) if epic_id else plan_clean(repo)
    verb = "would remove" if args.dry_run else "removed"
    problems = [] if args.dry_run else apply_clean(repo, plan)
    if epic_id and not args.dry_run:
        _drop_empty_dirs(plan.remove_worktrees)
    for path in plan.remove_worktrees:
        print(f"{verb} worktree {path}")
    for branch in plan.delete_branches:
        print(f"{verb.replace('remove', 'delete')} branch {branch}")
    for lanes in plan.empty_trash:
        print(f"{verb} the spare and trashed worktrees in {lanes}")
    for reason in plan.kept:
        print(f"kept {reason}")
    for problem in problems:
        print(f"could not clean: {problem}")
    if epic_id:
        state = "would keep" if args.dry_run else "kept"
        print(f"{state} branch epic/{epic_id} (its work) and .flow/epics/{epic_id} (its report)")
    elif not (plan.remove_worktrees or plan.delete_branches or plan.kept or plan.empty_trash):
        print("nothing to clean")
    return 0


def _drop_empty_dirs(removed: list[Path]) -> None:
    """The `<worktreeRoot>/<epicId>` folder a retired epic leaves empty (never a non-empty one)."""
    for parent in {path.parent for path in removed}:
        with contextlib.suppress(OSError):
            parent.rmdir()
