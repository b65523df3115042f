from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.engine.scenario import FLOWD, Scenario, coder, git, kill_group, story


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


def _worktrees(repo: Path) -> str:
    return git(repo, "worktree", "list", "--porcelain")


def test_clean_epic_retires_a_finished_epic_and_keeps_its_branch(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    sc = Scenario.create(tmp_path, stories, [coder("a", {"a.txt": "a"}), coder("b", {"b.txt": "b"})])
    assert sc.run().outcome == "done"
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert str(epic_wt) in _worktrees(sc.repo)
    dry = subprocess.run(
        [*FLOWD, "clean", "--epic", "ep", "--dry-run"], cwd=sc.repo, capture_output=True, text=True
    )
    assert dry.returncode == 0 and f"would remove worktree {epic_wt}" in dry.stdout
    assert epic_wt.exists()
    done = subprocess.run([*FLOWD, "clean", "--epic", "ep"], cwd=sc.repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"removed worktree {epic_wt}" in done.stdout
    assert "deleted branch story/ep/a" in done.stdout and "deleted branch story/ep/b" in done.stdout
    assert "kept branch epic/ep" in done.stdout
    assert not epic_wt.exists() and not (sc.worktree_root / "ep").exists()
    assert str(epic_wt) not in _worktrees(sc.repo)
    branches = git(sc.repo, "branch", "--format=%(refname:short)").split()
    assert branches == ["epic/ep", "main"]
    assert sorted(sc.epic_files()) == ["README.md", "a.txt", "b.txt"]
    assert (sc.repo / ".flow" / "epics" / "ep" / "report.md").exists()
    # The branch is the user's now: nothing of flowd holds it, so it merges and deletes as any other.
    git(sc.repo, "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "--ff-only", "epic/ep")
    git(sc.repo, "branch", "-d", "epic/ep")


def test_clean_epic_refuses_an_unfinished_or_unknown_epic(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder("a", {"a.txt": "a"}), {"when": {"role": "coder", "story": "b"}, "fail": "error"}]
    sc = Scenario.create(tmp_path, stories, rules)
    sc.run()
    before = _worktrees(sc.repo), git(sc.repo, "branch")
    refused = subprocess.run([*FLOWD, "clean", "--epic", "ep"], cwd=sc.repo, capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("flowd: --epic ep is not finished: b (failed); run it again")
    assert (_worktrees(sc.repo), git(sc.repo, "branch")) == before
    unknown = subprocess.run([*FLOWD, "clean", "--epic", "nope"], cwd=sc.repo, capture_output=True, text=True)
    assert unknown.returncode == 2 and "--epic nope: no such epic" in unknown.stderr


def test_clean_epic_refuses_while_a_run_of_it_is_alive(tmp_path: Path) -> None:
    rules = [coder("a", {"a.txt": "a"}, delayMs=60_000)]
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], rules)
    process = sc.spawn()
    try:
        assert process.stdout is not None
        run_id = json.loads(process.stdout.readline())["runId"]  # the run has started
        refused = subprocess.run(
            [*FLOWD, "clean", "--epic", "ep"], cwd=sc.repo, capture_output=True, text=True
        )
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"flowd: --epic ep: run {run_id} of it is still running")
        assert (sc.worktree_root / "ep" / "_epic").exists()
    finally:
        kill_group(process)
