"""The names flowd gives things in git and on disk (docs/repositories.md "Where things are"):
the one place each is made, so every module (and, through the protocol, every editor) agrees.

Git: the epic's branch `epic/<epic>`; a story's `story/<epic>/<id>`; a parallel task's
`story/<epic>/<id>--task-<n>`. Disk, under the worktree root (`<repo>/../<repoName>.flowd` by
default): `<epic>/<id>` a story's worktree, `<epic>/<id>.task-<n>` a parallel task's, `<epic>/_epic`
the epic's, `<epic>/_train/w<n>/_epic` a merge-train candidate's, `<epic>/_spare/<n>` and
`<epic>/_trash/<n>` worktrees kept for reuse and being deleted. Names that start with `_` are
never story ids (plan validation refuses them). In the repository: `.flow/epics/<epic>/` the
epic's state, with `report.md`, `report.json` and a story's `stories/<id>.findings.md` and
`stories/<id>.answers.md`.
"""

from __future__ import annotations

from pathlib import Path

EPIC_LANE = "_epic"  # the epic worktree's name, and the lane its gates run as
TRAIN_DIR = "_train"
SPARE_DIR = "_spare"
TRASH_DIR = "_trash"
TASK_WORKTREE = ".task-"  # `<story>.task-<n>`
TASK_BRANCH = "--task-"  # `story/<epic>/<story>--task-<n>`
LANE_GIT = "flowd-git"  # a lane repository, in its worktree's admin dir (flowd/vcs/lane_repo.py)


def epic_branch(epic_id: str) -> str:
    return f"epic/{epic_id}"


def story_branches(epic_id: str) -> str:
    """The prefix every story branch of the epic has."""
    return f"story/{epic_id}/"


def story_branch(epic_id: str, story_id: str) -> str:
    return story_branches(epic_id) + story_id


def task_branch(epic_id: str, story_id: str, index: int) -> str:
    return f"{story_branch(epic_id, story_id)}{TASK_BRANCH}{index}"


def default_worktree_root(repo_root: Path) -> Path:
    """Beside the repository, so agents never wander into it."""
    return repo_root.parent / f"{repo_root.name}.flowd"


def story_worktree(root: Path, epic_id: str, story_id: str) -> Path:
    return root / epic_id / story_id


def task_worktree(root: Path, epic_id: str, story_id: str, index: int) -> Path:
    return root / epic_id / f"{story_id}{TASK_WORKTREE}{index}"


def epic_worktree(root: Path, epic_id: str) -> Path:
    return root / epic_id / EPIC_LANE


def story_of_worktree(name: str) -> str:
    """The story a lane worktree's directory name belongs to (a parallel task's: its story's)."""
    return name.split(TASK_WORKTREE)[0]


# -- the epic's state in the repository, relative to its root --------------------------------------
def epics_state() -> Path:
    """Every epic's state, one folder each."""
    return Path(".flow", "epics")


def epic_state(epic_id: str) -> Path:
    return epics_state() / epic_id


def epic_stories(epic_id: str) -> Path:
    """Each story's state file, plan checkpoint, findings and gate logs."""
    return epic_state(epic_id) / "stories"


def story_findings(epic_id: str, story_id: str) -> Path:
    """The story's human log of review and judge findings."""
    return epic_stories(epic_id) / f"{story_id}.findings.md"


def story_answers(epic_id: str, story_id: str) -> Path:
    """A blocked story's free-text answers, read by its next turn (docs/answers.md)."""
    return epic_stories(epic_id) / f"{story_id}.answers.md"


def report_markdown(epic_id: str) -> Path:
    """The epic report people read, written at the end of every run."""
    return epic_state(epic_id) / "report.md"


def report_json(epic_id: str) -> Path:
    return epic_state(epic_id) / "report.json"


def as_shared(git_dir: Path, common_dir: Path) -> tuple[Path, Path]:
    """The git dir and common dir git reported in a worktree, as the repository's own: in a lane's
    worktree git reports its lane repository (`<common>/worktrees/<id>/flowd-git`, its own common
    dir), which stands for the admin dir it lies in and that admin dir's repository, so flowd (its
    CLI, the server, the daemon) finds the same repository from a lane's worktree as from any
    other worktree."""
    if common_dir.name == LANE_GIT and common_dir.parent.parent.name == "worktrees":
        shared = common_dir.parent.parent.parent
        if (shared / "HEAD").is_file():
            return common_dir.parent, shared
    return git_dir, common_dir
