"""`perimeter_now`: one answer for the task loop, the repair, `flowd check` and the server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flowd.engine.perimeter_now import perimeter_now
from flowd.plan.model import Story, StoryPlan
from flowd.vcs.gitops import Repo

PLAN = StoryPlan(
    epic_id="ep",
    epic="e",
    stories=[Story(id="a", title="A", owned=["a/"]), Story(id="b", title="B", owned=["b/"])],
)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True
    )


def _repo(tmp_path: Path) -> Repo:
    """A one-commit repository with the epic branch `epic/ep` at it."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text("r\n", encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    repo = Repo.discover(root)
    repo.create_branch("epic/ep", "main")
    return repo


def test_what_a_catch_up_brought_from_the_epic_never_counts_but_a_stray_does(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    epic = repo.worktree_add(tmp_path / "epic", "epic/ep")
    story_a = repo.worktree_add(tmp_path / "a", "story/ep/a", start="epic/ep")
    start = repo.head("story/ep/a")
    # Story b merges into the epic after a branched; a then catches up with the epic.
    (epic / "b").mkdir()
    (epic / "b" / "x.py").write_text("b\n", encoding="utf-8")
    repo.commit_all(epic, "ep: merge story b")
    (story_a / "a").mkdir()
    (story_a / "a" / "y.py").write_text("a\n", encoding="utf-8")
    repo.commit_all(story_a, "a: work")
    assert repo.merge(story_a, "epic/ep", "a: catch up").ok
    assert (story_a / "b" / "x.py").exists()
    assert perimeter_now(repo, PLAN, "a", story_a) == []
    # Diffing against the story's starting commit instead would blame a for b's merged file.
    assert "b/x.py" in repo.changed_files(story_a, start)
    (story_a / "stray.txt").write_text("oops\n", encoding="utf-8")
    (story_a / "b" / "x.py").write_text("changed by a\n", encoding="utf-8")
    found = {(p.path, p.kind) for p in perimeter_now(repo, PLAN, "a", story_a)}
    assert found == {("stray.txt", "outside"), ("b/x.py", "foreignOwned")}


def test_a_worktree_whose_checkout_is_still_being_written_changes_nothing(tmp_path: Path) -> None:
    """A story's worktree is added under the merge lock and its files written after it: until its
    index exists git lists every file as changed, and none of them is anyone's change."""
    repo = _repo(tmp_path)
    wt = repo.worktree_add(tmp_path / "a", "story/ep/a", start="epic/ep", beside=True, checkout=False)
    (wt / "README.md").write_text("r\n", encoding="utf-8")  # the checkout, half-way
    assert "README.md" in repo.changed_files(wt, "epic/ep")
    assert perimeter_now(repo, PLAN, "a", wt) == []
    repo.check_out_if_empty(wt)
    assert perimeter_now(repo, PLAN, "a", wt) == []
    (wt / "stray.txt").write_text("oops\n", encoding="utf-8")
    assert [(p.path, p.kind) for p in perimeter_now(repo, PLAN, "a", wt)] == [("stray.txt", "outside")]
