"""flowd.vcs.gitops against real repositories in temp dirs, with the user's git config shut out."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from flowd.base.errors import FlowdError, InputError
from flowd.vcs.gitcli import GitError, alternates, config_value, run_git
from flowd.vcs.gitops import Repo, worktree_default_root, worktree_root

IDENTITY_VARS = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
)


@pytest.fixture(autouse=True)
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No global or system git config and no identity: the tests see what a bare machine sees."""
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / "empty.gitconfig"
    gitconfig.write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in IDENTITY_VARS:
        monkeypatch.delenv(var, raising=False)
    return gitconfig


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def make_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for name, text in (
        files or {"README.md": "hello\n", "src/app.py": "x = 1\n", "src/util.py": "y = 2\n"}
    ).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "proj")


@pytest.fixture
def repo(proj: Path) -> Repo:
    return Repo.discover(proj)


def epic_and_story(repo: Repo, story: str = "s1") -> tuple[Path, Path]:
    root = worktree_default_root(repo) / "ep"
    epic = repo.worktree_add(root / "_epic", "epic/ep", start=repo.head())
    wt = repo.worktree_add(root / story, f"story/ep/{story}", start="epic/ep")
    return epic, wt


def porcelain(path: Path) -> str:
    return git(path, "status", "--porcelain", "--untracked-files=all")


# --- discovery --------------------------------------------------------------------------------


def test_discover_from_a_subdirectory(proj: Path) -> None:
    repo = Repo.discover(proj / "src")
    assert repo.root == proj.resolve()
    assert repo.git_dir == (proj / ".git").resolve()
    assert repo.common_dir == (proj / ".git").resolve()


def test_discover_rejects_a_non_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(InputError, match=r"plain is not a git repository"):
        Repo.discover(plain)


def test_discover_rejects_a_repository_without_commits(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(InputError, match=r"empty has no commits yet"):
        Repo.discover(empty)


def test_ensure_flow_excluded_adds_one_line(repo: Repo, proj: Path) -> None:
    (proj / ".flow").mkdir()
    (proj / ".flow" / "state.json").write_text("{}")
    assert ".flow/" in porcelain(proj)
    repo.ensure_flow_excluded()
    repo.ensure_flow_excluded()
    lines = (proj / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count(".flow/") == 1
    assert porcelain(proj) == ""


# --- refs and branches ------------------------------------------------------------------------


def test_refs_and_branches(repo: Repo, proj: Path) -> None:
    head = repo.head()
    assert head == git(proj, "rev-parse", "HEAD").strip()
    assert repo.rev_parse("main") == head
    assert repo.rev_parse("no-such-ref") is None
    with pytest.raises(GitError, match=r"'nope' names no commit in the repository at .*proj"):
        repo.head("nope")
    assert not repo.branch_exists("epic/ep")
    repo.create_branch("epic/ep", head)
    repo.create_branch("story/ep/a", "epic/ep")
    assert repo.branch_exists("epic/ep")
    assert repo.branches("story/ep/") == ["story/ep/a"]
    assert repo.branches() == ["epic/ep", "main", "story/ep/a"]
    with pytest.raises(GitError, match=r"could not create branch 'epic/ep' at 'main': .*already exists"):
        repo.create_branch("epic/ep", "main")
    assert repo.is_ancestor("main", "epic/ep")
    assert repo.is_ancestor("story/ep/a", "epic/ep")
    assert repo.unmerged_commits("story/ep/a", "epic/ep") == 0


def test_delete_branch_keeps_unique_work_unless_forced(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "new.txt").write_text("work\n")
    repo.commit_all(wt, "s1: work")
    repo.worktree_remove(wt)
    assert repo.unmerged_commits("story/ep/s1", "epic/ep") == 1
    assert not repo.is_ancestor("story/ep/s1", "epic/ep")
    with pytest.raises(GitError, match=r"branch 'story/ep/s1'.*1 commit\(s\) no other branch has"):
        repo.delete_branch("story/ep/s1")
    repo.delete_branch("story/ep/s1", force=True)
    assert not repo.branch_exists("story/ep/s1")
    repo.delete_branch("story/ep/s1")  # already gone: no error


def test_delete_branch_refuses_a_checked_out_branch(repo: Repo) -> None:
    epic_and_story(repo)
    with pytest.raises(GitError, match=r"could not delete branch 'story/ep/s1'"):
        repo.delete_branch("story/ep/s1", force=True)


# --- worktrees --------------------------------------------------------------------------------


def test_worktrees_live_outside_the_repository(repo: Repo, proj: Path) -> None:
    epic, wt = epic_and_story(repo)
    assert worktree_default_root(repo) == proj.parent / "proj.flowd"
    assert epic == proj.parent / "proj.flowd" / "ep" / "_epic"
    assert wt == proj.parent / "proj.flowd" / "ep" / "s1"
    assert (wt / "src" / "app.py").read_text() == "x = 1\n"
    assert git(wt, "branch", "--show-current").strip() == "story/ep/s1"
    infos = {info.path.resolve(): info for info in repo.worktrees()}
    assert infos[wt.resolve()].branch == "story/ep/s1"
    assert infos[wt.resolve()].head == repo.head()
    assert infos[proj.resolve()].branch == "main"
    assert not any(i.prunable or i.locked for i in infos.values())


def test_worktree_root_from_config(repo: Repo, proj: Path) -> None:
    assert worktree_root(repo, None) == worktree_default_root(repo)
    assert worktree_root(repo, "../elsewhere") == (proj.parent / "elsewhere").resolve()


def test_worktree_add_is_idempotent(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "wip.txt").write_text("uncommitted\n")
    again = repo.worktree_add(wt, "story/ep/s1", start="epic/ep")
    assert again == wt
    assert (wt / "wip.txt").read_text() == "uncommitted\n"
    with pytest.raises(GitError, match=r"worktree .*s1 on branch 'other'.*on story/ep/s1 instead"):
        repo.worktree_add(wt, "other", start="main")


def test_worktree_add_attaches_an_existing_branch(repo: Repo) -> None:
    repo.create_branch("story/ep/x", "main")
    wt = repo.worktree_add(worktree_default_root(repo) / "ep" / "x", "story/ep/x", start="main")
    assert git(wt, "branch", "--show-current").strip() == "story/ep/x"
    with pytest.raises(GitError, match=r"branch does not exist and no start point"):
        repo.worktree_add(worktree_default_root(repo) / "ep" / "y", "story/ep/y")


def test_worktree_deleted_by_hand_is_repaired_with_its_commits(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "done.txt").write_text("committed\n")
    commit = repo.commit_all(wt, "s1: work")
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    assert any(i.prunable for i in repo.worktrees())
    again = repo.worktree_add(wt, "story/ep/s1", start="epic/ep")
    assert repo.head_of(again) == commit
    assert (again / "done.txt").read_text() == "committed\n"
    assert not any(i.prunable for i in repo.worktrees())


def test_worktree_add_reattaches_a_branch_whose_worktree_moved_away_by_hand(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    elsewhere = worktree_default_root(repo) / "ep2" / "s1"
    assert repo.worktree_add(elsewhere, "story/ep/s1", start="epic/ep") == elsewhere
    assert git(elsewhere, "branch", "--show-current").strip() == "story/ep/s1"


def test_worktree_add_refuses_a_foreign_directory_and_a_busy_branch(repo: Repo, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("user data\n")
    with pytest.raises(GitError, match=r"foreign already exists and is not a worktree"):
        repo.worktree_add(foreign, "story/ep/z", start="main")
    assert (foreign / "mine.txt").read_text() == "user data\n"
    epic_and_story(repo)
    with pytest.raises(GitError, match=r"branch is already checked out in .*s1"):
        repo.worktree_add(tmp_path / "second", "story/ep/s1", start="main")
    with pytest.raises(GitError, match=r"branch is already checked out in .*proj"):
        repo.worktree_add(tmp_path / "third", "main")


def test_worktree_remove(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "wip.txt").write_text("uncommitted\n")
    with pytest.raises(GitError, match=r"worktree .*s1: it has uncommitted changes"):
        repo.worktree_remove(wt)
    repo.worktree_remove(wt, force=True)
    assert not wt.exists()
    repo.worktree_remove(wt)  # already gone: no error
    assert repo.branch_exists("story/ep/s1")
    with pytest.raises(GitError, match=r"user's own checkout"):
        repo.worktree_remove(repo.root, force=True)


def test_worktree_remove_of_a_hand_deleted_worktree_prunes_it(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    repo.worktree_remove(wt)
    assert all(i.path.resolve() != wt.resolve() for i in repo.worktrees())


def test_worktree_move_keeps_uncommitted_work(repo: Repo, tmp_path: Path) -> None:
    _, wt = epic_and_story(repo)
    (wt / "wip.txt").write_text("uncommitted\n")
    new = repo.worktree_move(wt, tmp_path / "moved" / "deeper" / "s1")
    assert not wt.exists()
    assert (new / "wip.txt").read_text() == "uncommitted\n"
    assert git(new, "branch", "--show-current").strip() == "story/ep/s1"
    with pytest.raises(GitError, match=r"could not move the worktree .*nowhere"):
        repo.worktree_move(tmp_path / "nowhere", tmp_path / "x")


def test_worktree_prune(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    repo.worktree_prune()
    assert len(repo.worktrees()) == 2  # the user's checkout and the epic's


# --- inside a worktree ------------------------------------------------------------------------


def test_status_paths_lists_every_kind_of_change(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    assert not repo.is_dirty(wt)
    (wt / "README.md").write_text("changed\n")
    (wt / "src" / "util.py").unlink()
    (wt / "new" / "deep").mkdir(parents=True)
    (wt / "new" / "deep" / "a.txt").write_text("a\n")
    git(wt, "mv", "src/app.py", "src/main.py")
    (wt / "staged.txt").write_text("s\n")
    git(wt, "add", "staged.txt")
    assert repo.status_paths(wt) == [
        "README.md",
        "new/deep/a.txt",
        "src/app.py",
        "src/main.py",
        "src/util.py",
        "staged.txt",
    ]
    assert repo.is_dirty(wt)


def test_commit_all(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    assert repo.commit_all(wt, "nothing") is None
    (wt / "src" / "util.py").unlink()
    (wt / "added.txt").write_text("a\n")
    commit = repo.commit_all(wt, "s1: work")
    assert commit is not None and commit == repo.head_of(wt)
    assert git(wt, "log", "-1", "--format=%s").strip() == "s1: work"
    assert not repo.is_dirty(wt)
    assert repo.commit_all(wt, "again") is None


def test_commit_remaining_commits_what_commit_all_would(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    head = repo.head_of(wt)
    assert repo.commit_remaining(wt, "nothing") is None
    assert repo.head_of(wt) == head
    (wt / "src" / "util.py").unlink()
    (wt / "added.txt").write_text("a\n")
    (wt / "staged.txt").write_text("s\n")
    git(wt, "add", "staged.txt")  # staged by someone else: still a change to commit
    commit = repo.commit_remaining(wt, "s1: remaining changes")
    assert commit is not None and commit == repo.head_of(wt)
    assert git(wt, "log", "-1", "--format=%s").strip() == "s1: remaining changes"
    assert sorted(git(wt, "show", "--name-only", "--format=", "HEAD").split()) == [
        "added.txt",
        "src/util.py",
        "staged.txt",
    ]
    assert not repo.is_dirty(wt)
    assert repo.commit_remaining(wt, "again") is None


def test_commit_without_any_identity_configured(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "a.txt").write_text("a\n")
    assert repo.commit_all(wt, "s1: work") is not None
    assert git(wt, "log", "-1", "--format=%an <%ae>").strip() == "flowd <flowd@localhost>"
    merged = repo.merge(worktree_default_root(repo) / "ep" / "_epic", "story/ep/s1", "ep: merge story s1")
    assert merged.ok
    assert git(wt, "log", "-1", "--format=%cn", "epic/ep").strip() == "flowd"


def test_commit_uses_the_configured_identity(proj: Path, no_user_config: Path) -> None:
    no_user_config.write_text("[user]\n\tname = Ada\n\temail = ada@example.com\n")
    repo = Repo.discover(proj)
    _, wt = epic_and_story(repo)
    (wt / "a.txt").write_text("a\n")
    repo.commit_all(wt, "s1: work")
    assert git(wt, "log", "-1", "--format=%an <%ae>").strip() == "Ada <ada@example.com>"


def test_changed_files_counts_committed_uncommitted_untracked_and_deleted(repo: Repo) -> None:
    epic, wt = epic_and_story(repo)
    (wt / "committed.txt").write_text("c\n")
    repo.commit_all(wt, "s1: one")
    (wt / "README.md").write_text("modified, not committed\n")
    (wt / "src" / "util.py").unlink()
    (wt / "untracked" / "n.txt").parent.mkdir()
    (wt / "untracked" / "n.txt").write_text("n\n")
    # Work that reaches the epic branch after the story started is not the story's.
    (epic / "other-story.txt").write_text("o\n")
    repo.commit_all(epic, "ep: other story")
    assert repo.changed_files(wt, "epic/ep") == [
        "README.md",
        "committed.txt",
        "src/util.py",
        "untracked/n.txt",
    ]


def test_diff_shows_new_files_and_leaves_the_index_alone(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "fresh.txt").write_text("brand new\n")
    (wt / "src" / "app.py").write_text("x = 2\n")
    before = porcelain(wt)
    index = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
    index_bytes = index.read_bytes()
    patch = repo.diff(wt, "epic/ep")
    assert "+brand new" in patch
    assert "-x = 1" in patch and "+x = 2" in patch
    assert porcelain(wt) == before
    assert index.read_bytes() == index_bytes  # the lane's own index, byte for byte


def test_merge_success_creates_a_merge_commit(repo: Repo) -> None:
    epic, wt = epic_and_story(repo)
    (wt / "feature.txt").write_text("f\n")
    repo.commit_all(wt, "s1: work")
    result = repo.merge(epic, "story/ep/s1", "ep: merge story s1")
    assert result.ok and not result.already_merged and result.conflicts == []
    assert result.commit == repo.head("epic/ep")
    assert len(git(epic, "log", "-1", "--format=%P").split()) == 2
    assert git(epic, "log", "-1", "--format=%s").strip() == "ep: merge story s1"
    assert (epic / "feature.txt").exists()
    assert porcelain(epic) == ""


def test_merge_already_merged_makes_no_commit(repo: Repo) -> None:
    epic, _ = epic_and_story(repo)
    head = repo.head_of(epic)
    result = repo.merge(epic, "story/ep/s1", "ep: merge story s1")
    assert result.ok and result.already_merged and result.commit == head
    assert repo.head_of(epic) == head


def test_merge_conflict_is_aborted_and_leaves_the_epic_clean(repo: Repo) -> None:
    epic, a = epic_and_story(repo, "a")
    b = repo.worktree_add(worktree_default_root(repo) / "ep" / "b", "story/ep/b", start="epic/ep")
    (a / "src" / "app.py").write_text("x = 'a'\n")
    repo.commit_all(a, "a: work")
    (b / "src" / "app.py").write_text("x = 'b'\n")
    (b / "src" / "util.py").unlink()
    repo.commit_all(b, "b: work")
    assert repo.merge(epic, "story/ep/a", "ep: merge story a").ok
    head = repo.head_of(epic)
    result = repo.merge(epic, "story/ep/b", "ep: merge story b")
    assert not result.ok and result.conflicts == ["src/app.py"]
    assert result.commit == head == repo.head_of(epic)
    assert porcelain(epic) == ""
    assert not (repo.common_dir / "worktrees" / "_epic" / "MERGE_HEAD").exists()


def test_catch_up_merge_prefers_incoming(repo: Repo) -> None:
    epic, a = epic_and_story(repo, "a")
    b = repo.worktree_add(worktree_default_root(repo) / "ep" / "b", "story/ep/b", start="epic/ep")
    (a / "src" / "app.py").write_text("x = 'a'\n")
    repo.commit_all(a, "a: work")
    repo.merge(epic, "story/ep/a", "ep: merge story a")
    (b / "src" / "app.py").write_text("x = 'b'\n")
    repo.commit_all(b, "b: work")
    result = repo.merge(b, "epic/ep", "b: catch up with epic/ep", prefer_incoming=True)
    assert result.ok
    assert (b / "src" / "app.py").read_text() == "x = 'a'\n"


def test_merge_refused_for_a_dirty_tree_is_an_error(repo: Repo) -> None:
    epic, wt = epic_and_story(repo)
    (wt / "src" / "app.py").write_text("x = 3\n")
    repo.commit_all(wt, "s1: work")
    (epic / "src" / "app.py").write_text("local edit\n")
    with pytest.raises(
        GitError, match=r"merge 'story/ep/s1' into the worktree .*_epic: .*overwritten .*src/app.py$"
    ):
        repo.merge(epic, "story/ep/s1", "ep: merge story s1")
    assert (epic / "src" / "app.py").read_text() == "local edit\n"
    with pytest.raises(GitError, match=r"could not merge 'no-such-branch'"):
        repo.merge(epic, "no-such-branch", "m")


def test_rollback_with_reset_hard(repo: Repo) -> None:
    epic, wt = epic_and_story(repo)
    checkpoint = repo.head_of(epic)
    (wt / "bad.txt").write_text("breaks the gates\n")
    repo.commit_all(wt, "s1: work")
    assert repo.merge(epic, "story/ep/s1", "ep: merge story s1").ok
    repo.reset_hard(epic, checkpoint)
    assert repo.head("epic/ep") == checkpoint
    assert not (epic / "bad.txt").exists()
    assert porcelain(epic) == ""


def test_restore_paths_restores_and_deletes(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "src" / "app.py").write_text("strayed\n")
    (wt / "src" / "committed-stray.py").write_text("c\n")
    repo.commit_all(wt, "s1: strays")
    (wt / "README.md").unlink()
    (wt / "loose.txt").write_text("untracked\n")
    (wt / "stray-dir" / "x").mkdir(parents=True)
    (wt / "stray-dir" / "x" / "y.txt").write_text("y\n")
    (wt / "src" / "util.py").write_text("keep me, not listed\n")
    repo.restore_paths(
        wt, ["src/app.py", "src/committed-stray.py", "README.md", "loose.txt", "stray-dir"], "epic/ep"
    )
    assert (wt / "src" / "app.py").read_text() == "x = 1\n"
    assert (wt / "README.md").read_text() == "hello\n"
    assert not (wt / "src" / "committed-stray.py").exists()
    assert not (wt / "loose.txt").exists()
    assert not (wt / "stray-dir").exists()
    assert (wt / "src" / "util.py").read_text() == "keep me, not listed\n"
    repo.commit_all(wt, "s1: put paths outside the perimeter back")
    assert repo.changed_files(wt, "epic/ep") == ["src/util.py"]


def test_restore_a_folder_exactly(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    (wt / "src" / "extra.py").write_text("e\n")
    (wt / "src" / "app.py").write_text("changed\n")
    repo.restore_paths(wt, ["src/"], "epic/ep")
    assert sorted(p.name for p in (wt / "src").iterdir()) == ["app.py", "util.py"]
    assert (wt / "src" / "app.py").read_text() == "x = 1\n"
    assert not repo.is_dirty(wt)


def test_restore_paths_rejects_unsafe_paths(repo: Repo) -> None:
    _, wt = epic_and_story(repo)
    for bad in ("../proj/README.md", "/etc/passwd", ""):
        with pytest.raises(InputError, match=r"must be relative to the worktree"):
            repo.restore_paths(wt, [bad], "epic/ep")


def test_mutations_of_the_users_checkout_are_refused(repo: Repo, proj: Path) -> None:
    (proj / "README.md").write_text("user edit\n")
    for action in (
        lambda: repo.commit_all(proj, "x"),
        lambda: repo.reset_hard(proj, "HEAD"),
        lambda: repo.merge(proj, "main", "x"),
        lambda: repo.restore_paths(proj, ["README.md"], "HEAD"),
    ):
        with pytest.raises(GitError, match=r"flowd never changes the user's checkout"):
            action()
    assert (proj / "README.md").read_text() == "user edit\n"


def test_a_whole_story_never_touches_the_users_checkout(repo: Repo, proj: Path) -> None:
    (proj / "README.md").write_text("the user's own unsaved work\n")
    (proj / "scratch.txt").write_text("untracked by the user\n")
    status, branch, head = porcelain(proj), git(proj, "branch", "--show-current"), repo.head()
    repo.ensure_flow_excluded()
    epic, wt = epic_and_story(repo)
    (wt / "src" / "app.py").write_text("x = 42\n")
    (wt / "feature.py").write_text("f = 1\n")
    repo.commit_all(wt, "s1: task 1")
    (wt / "more.py").write_text("m = 1\n")
    repo.commit_all(wt, "s1: task 2")
    assert repo.changed_files(wt, "epic/ep") == ["feature.py", "more.py", "src/app.py"]
    assert repo.merge(epic, "story/ep/s1", "ep: merge story s1").ok
    repo.worktree_remove(wt)
    repo.delete_branch("story/ep/s1")
    assert porcelain(proj) == status
    assert git(proj, "branch", "--show-current") == branch
    assert repo.head() == head
    assert (proj / "src" / "app.py").read_text() == "x = 1\n"


def test_errors_are_flowd_errors_naming_the_place(repo: Repo, tmp_path: Path) -> None:
    with pytest.raises(FlowdError, match=r"could not read HEAD of the worktree .*missing"):
        repo.head_of(tmp_path / "missing")
    with pytest.raises(GitError, match=r"could not list the files changed in the worktree .* since 'nope'"):
        repo.changed_files(repo.root, "nope")


def test_concurrent_stories_do_not_race(repo: Repo) -> None:
    epic, _ = epic_and_story(repo, "first")
    errors: list[BaseException] = []
    lock = threading.Lock()

    def story(name: str) -> None:
        try:
            wt = repo.worktree_add(worktree_default_root(repo) / "ep" / name, f"story/ep/{name}", "epic/ep")
            (wt / f"{name}.txt").write_text(name)
            repo.commit_all(wt, f"{name}: work")
            assert repo.changed_files(wt, "epic/ep") == [f"{name}.txt"]
            with lock:  # the engine's merge lock
                assert repo.merge(epic, f"story/ep/{name}", f"ep: merge story {name}").ok
            repo.worktree_remove(wt)
            repo.delete_branch(f"story/ep/{name}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=story, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in epic.glob("t*.txt")) == ["t0.txt", "t1.txt", "t2.txt", "t3.txt"]
    assert repo.branches("story/ep/") == ["story/ep/first"]


def test_git_dir_variables_from_the_caller_are_ignored(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    _, wt = epic_and_story(repo)
    monkeypatch.setenv("GIT_DIR", os.fspath(repo.git_dir))
    (wt / "a.txt").write_text("a\n")
    assert repo.status_paths(wt) == ["a.txt"]


def test_flowds_checkouts_are_parallel_unless_the_environment_says_otherwise(
    proj: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def workers() -> str:
        return run_git(proj, ["config", "--get", "checkout.workers"], "read").stdout.strip()

    assert workers() == "0"  # one worker per core, for flowd's own git only
    assert run_git(proj, ["config", "--get", "core.hooksPath"], "read").stdout.strip() == os.devnull
    plain = subprocess.run(
        ["git", "config", "--get", "checkout.workers"], cwd=proj, capture_output=True, check=False
    )
    assert plain.returncode == 1  # the repository's config is untouched
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "checkout.workers")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "3")
    assert workers() == "3"


def test_discover_inside_a_linked_worktree(repo: Repo, proj: Path) -> None:
    _, wt = epic_and_story(repo)
    inner = Repo.discover(wt / "src")
    assert inner.root == wt.resolve()
    assert inner.common_dir == (proj / ".git").resolve()
    assert inner.git_dir != inner.common_dir


def test_discard_worktree_throws_away_work_and_branch(tmp_path: Path) -> None:
    repo_dir = tmp_path / "r"
    repo_dir.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo_dir, check=True)
    (repo_dir / "f").write_text("x", encoding="utf-8")
    subprocess.run(["git", "add", "f"], cwd=repo_dir, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], cwd=repo_dir, check=True
    )
    repo = Repo.discover(repo_dir)
    wt = repo.worktree_add(tmp_path / "wt", "topic", start="main")
    (wt / "work.txt").write_text("unsaved", encoding="utf-8")
    assert repo.discard_worktree(wt, "topic") is None
    assert not wt.exists() and not repo.branch_exists("topic")
    assert repo.discard_worktree(wt, "topic") is None  # already gone: nothing to do, no error


def test_a_train_slot_a_killed_git_left_locked_and_missing_is_taken_over(repo: Repo, tmp_path: Path) -> None:
    """`git worktree add` killed before it finished leaves its path recorded, locked and missing;
    `prune` keeps it and a plain add refuses it. flowd's own slot is reclaimed (`-f -f`)."""
    slot = tmp_path / "proj.flowd" / "ep" / "_train" / "w1" / "_epic"
    slot.parent.mkdir(parents=True)
    subprocess.run(
        ["git", "worktree", "add", "-q", "--lock", "--detach", str(slot)], cwd=repo.root, check=True
    )
    shutil.rmtree(slot)
    repo.worktree_prune()
    with pytest.raises(GitError, match="missing but locked"):
        repo.worktree_add_detached(slot)
    repo.worktree_add_detached(slot, reclaim=True)
    assert (slot / "README.md").exists()


def test_worktree_add_beside_makes_what_a_plain_add_makes_and_finishes_a_killed_one(repo: Repo) -> None:
    """`beside` (a lane's checkout outside the repository's lock, so lanes check out at once) gives
    the same worktree as one `git worktree add`; one a kill left between git's record and the
    checkout (no index yet) is checked out by the next add."""
    root = worktree_default_root(repo) / "ep"

    def files(wt: Path) -> dict[str, str]:
        return {
            p.relative_to(wt).as_posix(): p.read_text()
            for p in wt.rglob("*")
            if p.is_file() and p.name != ".git"
        }

    plain = repo.worktree_add(root / "plain", "story/ep/p", start="main")
    beside = repo.worktree_add(root / "beside", "story/ep/b", start="main", beside=True)
    git(repo.root, "worktree", "add", "-q", "--no-checkout", "-b", "story/ep/k", str(root / "k"), "main")
    killed = repo.worktree_add(root / "k", "story/ep/k", start="main", beside=True)
    for wt, branch in ((beside, "story/ep/b"), (killed, "story/ep/k")):
        assert files(wt) == files(plain) and files(wt)
        assert git(wt, "status", "--porcelain") == ""
        assert git(wt, "branch", "--show-current").strip() == branch


ODD = 'a:b "c" \\d ;#e\tf\ng'  # a path git's separators, quotes and escapes would misread


def test_paths_written_for_git_are_read_back_as_they_are(tmp_path: Path) -> None:
    """`config_value` and `alternates` (flowd/vcs/gitcli.py), read back by git itself: a config
    value, and an object directory in `GIT_ALTERNATE_OBJECT_DIRECTORIES` and in an alternates file."""
    config = tmp_path / "config"
    config.write_text(f"[include]\n\tpath = {config_value(ODD)}\n", encoding="utf-8")
    said = subprocess.run(
        ["git", "config", "-f", str(config), "-z", "--get", "include.path"], capture_output=True, text=True
    )
    assert said.returncode == 0 and said.stdout == ODD + "\0", said.stderr
    store = tmp_path / ODD / "objects"
    store.mkdir(parents=True)
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], input="x\n", capture_output=True, text=True,
        env={**os.environ, "GIT_OBJECT_DIRECTORY": str(store)}, check=True,
    ).stdout.strip()  # fmt: skip
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    env = {**os.environ, "GIT_ALTERNATE_OBJECT_DIRECTORIES": alternates([tmp_path / "none", store])}
    found = subprocess.run(["git", "cat-file", "-t", blob], cwd=repo, capture_output=True, text=True, env=env)
    assert found.stdout.strip() == "blob", found.stderr
    (repo / ".git" / "objects" / "info" / "alternates").write_text(alternates([store], "\n") + "\n")
    found = subprocess.run(["git", "cat-file", "-t", blob], cwd=repo, capture_output=True, text=True)
    assert found.stdout.strip() == "blob", found.stderr


@pytest.mark.parametrize("how", ["commit", "diff"])
def test_a_same_size_edit_in_the_index_s_second_is_not_missed(repo: Repo, how: str) -> None:
    """flowd stages in a copy of the worktree's index. git reads an entry whose file changed in
    the second the index was written as "racily clean" and looks at the file's bytes, and it
    knows that second from the index file's own time: a copy made a second later hid a same-size
    edit from it (with `core.trustctime` off, or on a file system whose times tick coarsely), and
    the story's commit and the reviewer's diff left it out. The copy now keeps the index's time."""
    _, wt = epic_and_story(repo)
    git(wt, "config", "core.trustctime", "false")
    app, index = wt / "src" / "app.py", Path(git(wt, "rev-parse", "--git-path", "index").strip())
    if not index.is_absolute():
        index = wt / index
    second = (int(time.time()) - 5) * 1_000_000_000
    os.utime(app, ns=(second, second))
    git(wt, "update-index", "--refresh")  # the entry now says: written at `second`
    os.utime(index, ns=(second, second))  # and so was the index: the entry is racily clean
    app.write_text("x = 3\n")  # the same size as "x = 1\n", in the same second
    os.utime(app, ns=(second, second))
    # git itself sees it (asked not to write the index, which would mark the entry for good)
    assert git(wt, "--no-optional-locks", "status", "--porcelain", "src/app.py").startswith(" M")
    if how == "commit":
        assert repo.commit_all(wt, "s1: work") is not None
        assert git(wt, "show", "HEAD:src/app.py") == "x = 3\n"
    else:
        assert "+x = 3" in repo.diff(wt, "epic/ep")


@pytest.mark.parametrize("how", ["commit", "diff"])
@pytest.mark.parametrize("planted", ["fifo", "file"])
def test_an_index_replaced_by_a_link_is_not_read_through(
    repo: Repo, how: str, planted: str, tmp_path: Path
) -> None:
    """A lane may write its worktree's admin dir (docs/sandbox.md "flowd's own git"): an `index`
    it replaced with a link is not read through by flowd's copy of it (a FIFO's reader waits, a
    file of yours is not flowd's to read); the step fails with one sentence, and the link's target
    is left as it was. (The step's admin check puts such a link back first; this is the copy's
    own guard.)"""
    _, wt = epic_and_story(repo)
    (wt / "src" / "app.py").write_text("x = 2\n")
    index = Path(git(wt, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
    target = tmp_path / "planted"
    if planted == "fifo":
        os.mkfifo(target)
    else:
        target.write_bytes(b"DIRC not an index of this worktree")
    index.unlink()
    index.symlink_to(target)
    with pytest.raises(GitError, match="is not a regular file"):
        if how == "commit":
            repo.commit_all(wt, "s1: work")
        else:
            repo.diff(wt, "epic/ep")
    assert index.is_symlink()
    if planted == "file":
        assert target.read_bytes() == b"DIRC not an index of this worktree"
