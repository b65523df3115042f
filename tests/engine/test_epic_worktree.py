"""The epic worktree a run finds missing: registered unchecked-out, the epic branch landed on, and
checked out from the merge train's last candidate when the run ends (docs/merging.md "The epic
worktree"). A real `flowd run` process, the scripted agent, real git; a story waits for a file the
test creates, so the mid-run look needs no timing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flowd.base.errors import FlowdError
from flowd.engine import epic_worktree
from flowd.events.model import StoryMerged
from flowd.vcs.gitops import Repo, init_repo
from tests.engine.scenario import Scenario, git, kill_group, story
from tests.engine.test_review_comments import RUN_ID, coder_rule, until, wait_for


@pytest.mark.slow
def test_a_fresh_run_checks_the_epic_worktree_out_once_from_the_last_candidate(tmp_path: Path) -> None:
    go = tmp_path / "go-b"
    rules = [
        coder_rule("a", {"a.txt": "a\n"}),
        coder_rule("b", {"b.txt": "b\n"}, run=[wait_for(go)]),
    ]
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"]), story("b", ["b.txt"])],
        rules,
        files={"a.txt": "", "b.txt": "", ".gitignore": "local.env\n", ".worktreeinclude": "local.env\n"},
        settings='gates = ["test -f local.env"]\njudgeRounds = 0\n',
    )
    (sc.repo / "local.env").write_text("KEY=1\n", encoding="utf-8")
    epic_wt = sc.worktree_root / "ep" / "_epic"
    process = sc.spawn("--run-id", RUN_ID)
    try:
        until(sc, lambda ev: any(isinstance(e.event, StoryMerged) for e in ev), "a merged")
        # Mid-run: git knows the epic worktree, nothing of it is written; the branch is the epic.
        assert sorted(os.listdir(epic_wt)) == [".git"]
        assert epic_worktree.placeholder(epic_wt)
        assert str(epic_wt) in git(sc.repo, "worktree", "list", "--porcelain")
        assert git(sc.repo, "show", "epic/ep:a.txt") == "a\n"
        slot = sc.worktree_root / "ep" / "_train" / "w1" / "_epic"
        assert (slot / "a.txt").read_text(encoding="utf-8") == "a\n"
        go.touch()
        assert process.wait(timeout=120) == 0
    finally:
        kill_group(process)
    # The end: the last candidate's worktree moved into `_epic`, on the branch, clean, with the
    # user's copied ignored file; no candidate folder is left.
    assert not epic_worktree.placeholder(epic_wt)
    assert git(epic_wt, "symbolic-ref", "HEAD").strip() == "refs/heads/epic/ep"
    assert git(epic_wt, "rev-parse", "HEAD") == git(sc.repo, "rev-parse", "epic/ep")
    assert git(epic_wt, "status", "--porcelain") == ""
    assert (epic_wt / "a.txt").read_text(encoding="utf-8") == "a\n"
    assert (epic_wt / "b.txt").read_text(encoding="utf-8") == "b\n"
    assert (epic_wt / "local.env").read_text(encoding="utf-8") == "KEY=1\n"
    assert not (sc.worktree_root / "ep" / "_train").exists()
    admin = Path(git(epic_wt, "rev-parse", "--absolute-git-dir").strip())
    assert admin.name != "_epic", "the epic worktree is the candidate's, moved (not a new checkout)"


# The identity scenario.py commits with, as `-c` options (no environment of its own).
IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@t")


def _repo(tmp_path: Path) -> Repo:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "f.txt").write_text("one\n", encoding="utf-8")
    repo = init_repo(tmp_path / "repo", "init")
    repo.create_branch("epic/x", "HEAD")
    return repo


def _commit_on(repo: Repo, base: str, text: str) -> str:
    tree = git(repo.root, "rev-parse", f"{base}^{{tree}}").strip()
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo.root, input=text, capture_output=True,
        text=True, check=True,
    ).stdout.strip()  # fmt: skip
    index = repo.root / ".git" / "scratch-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", tree], cwd=repo.root, env=env, check=True)
    subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},f.txt"],
        cwd=repo.root,
        env=env,
        check=True,
    )
    new_tree = subprocess.run(
        ["git", "write-tree"], cwd=repo.root, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    index.unlink()
    return subprocess.run(
        ["git", *IDENTITY, "commit-tree", new_tree, "-p", base, "-m", text], cwd=repo.root,
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def test_a_landing_on_the_placeholder_moves_the_branch_only_from_the_head_it_was_built_on(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    wt = repo.worktree_register(tmp_path / "wts" / "_epic", "epic/x")
    assert sorted(os.listdir(wt)) == [".git"] and epic_worktree.placeholder(wt)
    base = repo.head("epic/x")
    tip = _commit_on(repo, base, "two\n")
    epic_worktree.land(repo, wt, "epic/x", tip, base)
    assert repo.head("epic/x") == tip and sorted(os.listdir(wt)) == [".git"]
    # The branch moved since the candidate was built (the user committed): refused, kept.
    other = _commit_on(repo, base, "three\n")
    with pytest.raises(FlowdError, match="could not move branch 'epic/x'"):
        epic_worktree.land(repo, wt, "epic/x", other, base)
    assert repo.head("epic/x") == tip


def test_finishing_without_a_candidate_checks_the_placeholder_out_in_full(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    wt = repo.worktree_register(tmp_path / "wts" / "_epic", "epic/x")
    assert epic_worktree.finish(repo, wt, "epic/x", None) == "in full"
    assert (wt / "f.txt").read_text(encoding="utf-8") == "one\n"
    assert git(wt, "status", "--porcelain") == "" and epic_worktree.checked_out(wt)


def test_finishing_moves_a_candidate_in_and_puts_it_on_the_branch(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    wt = repo.worktree_register(tmp_path / "wts" / "_epic", "epic/x")
    base = repo.head("epic/x")
    tip = _commit_on(repo, base, "two\n")
    repo.move_branch("epic/x", tip, base)
    # A candidate left at an older commit, with a gate's leftovers: all of it made the branch's.
    slot = repo.worktree_add_detached(tmp_path / "wts" / "_train" / "w1" / "_epic", base)
    (slot / "build.log").write_text("gate output\n", encoding="utf-8")
    how = epic_worktree.finish(repo, wt, "epic/x", slot)
    assert how == "from the merge train's last candidate worktree"
    assert not slot.exists() and not (tmp_path / "wts" / "_train").exists()
    assert (wt / "f.txt").read_text(encoding="utf-8") == "two\n" and not (wt / "build.log").exists()
    assert git(wt, "symbolic-ref", "HEAD").strip() == "refs/heads/epic/x"
    assert git(wt, "status", "--porcelain", "--ignored") == ""


def test_a_placeholder_whose_folder_was_deleted_is_registered_again(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    wt = repo.worktree_register(tmp_path / "wts" / "_epic", "epic/x")
    (wt / ".git").unlink()
    wt.rmdir()
    repo.worktree_register(wt, "epic/x")
    assert epic_worktree.placeholder(wt)
