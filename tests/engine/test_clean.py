from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.engine.scenario import FLOWD, Scenario, coder, git, story


def test_clean_removes_merged_and_keeps_work_the_epic_lacks(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder("a", {"a.txt": "a"}), {"when": {"role": "coder", "story": "b"}, "fail": "error"}]
    sc = Scenario.create(tmp_path, stories, rules)
    sc.run()
    # b failed: its worktree and branch stay (the epic lacks its work, and it resumes there).
    (sc.worktree_root / "ep" / "b" / "b.txt").write_text("in progress\n", encoding="utf-8")
    dry = subprocess.run([*FLOWD, "clean", "--dry-run"], cwd=sc.repo, capture_output=True, text=True)
    assert dry.returncode == 0
    assert "would delete branch story/ep/a" in dry.stdout
    assert "story/ep/b" not in dry.stdout
    assert "story/ep/a" in git(sc.repo, "branch")
    done = subprocess.run([*FLOWD, "clean"], cwd=sc.repo, capture_output=True, text=True)
    assert done.returncode == 0 and "deleted branch story/ep/a" in done.stdout
    branches = git(sc.repo, "branch").split()
    assert "story/ep/a" not in branches and "story/ep/b" in branches
    assert (sc.worktree_root / "ep" / "b" / "b.txt").exists()


def test_clean_forgets_epics_whose_state_is_gone_but_keeps_dirty_worktrees(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder("a", {"a.txt": "a"}), {"when": {"role": "coder", "story": "b"}, "fail": "error"}]
    sc = Scenario.create(tmp_path, stories, rules)
    sc.run()
    (sc.worktree_root / "ep" / "b" / "wip.txt").write_text("unsaved\n", encoding="utf-8")
    shutil.rmtree(sc.repo / ".flow" / "epics")
    done = subprocess.run([*FLOWD, "clean"], cwd=sc.repo, capture_output=True, text=True)
    assert done.returncode == 0
    assert "uncommitted changes" in done.stdout
    assert (sc.worktree_root / "ep" / "b" / "wip.txt").exists()
    assert not (sc.worktree_root / "ep" / "_epic").exists()
    assert "story/ep/a" not in git(sc.repo, "branch")
