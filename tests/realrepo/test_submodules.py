"""Submodules (docs/repositories.md): every story, task and epic worktree has them checked out at
the commit its branch records, copied from the user's checkout with no network; a story moving a
submodule's commit is a perimeter question like any path."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from flowd.events.model import PerimeterViolation
from flowd.vcs.gitcli import GitError
from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, story

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]
LOCAL = ["-c", "protocol.file.allow=always"]


def _library(root: Path) -> Path:
    lib = root / "upstream-lib"
    lib.mkdir()
    (lib / "util.py").write_text("VALUE = 41\n", encoding="utf-8")
    git(lib, "init", "-q", "-b", "main")
    git(lib, *ID, "add", "-A")
    git(lib, *ID, "commit", "-q", "-m", "lib")
    return lib


def _add_submodule(sc: Scenario, lib: Path) -> None:
    """The team's repository uses `lib` at `libs/util`; then the upstream goes away, so any
    clone from its URL would fail: every worktree must be served from the user's checkout."""
    git(sc.repo, *LOCAL, "submodule", "add", "-q", str(lib), "libs/util")
    git(sc.repo, *ID, "commit", "-q", "-m", "use the library")
    shutil.rmtree(lib)


GATE = "python3 -c 'import sys; sys.path.insert(0, \"libs/util\"); import util; assert util.VALUE >= 41'"


def test_every_worktree_gets_the_submodule_from_the_users_checkout(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    # The coder's own check runs in the story worktree: it sees the library's file.
    rules = [
        coder("a", {"a.txt": "a\n"}, run=["test -f libs/util/util.py"]),
        coder("b", {"b.txt": "b\n"}, run=["test -f libs/util/util.py"]),
    ]
    settings = f"gates = [{json.dumps(GATE)}]\njudgeRounds = 0\n"
    sc = Scenario.create(tmp_path, stories, rules, settings=settings)
    _add_submodule(sc, _library(tmp_path))
    config_before = (sc.repo / ".git" / "config").read_text(encoding="utf-8")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert (epic_wt / "libs" / "util" / "util.py").read_text(encoding="utf-8") == "VALUE = 41\n"
    # The user's shared config is untouched (the local source was a one-command override), and
    # merged stories' worktrees, submodules and all, are gone.
    assert (sc.repo / ".git" / "config").read_text(encoding="utf-8") == config_before
    assert sorted(p.name for p in (sc.worktree_root / "ep").iterdir()) == ["_epic"]
    assert git(sc.repo, "status", "--porcelain", "--", "libs").strip() == ""


def _bump_commands() -> list[str]:
    """A coder moving the submodule to a new commit of its own, as an agent would."""
    return [
        "cd libs/util && echo 'VALUE = 42' > util.py && "
        "git -c user.name=a -c user.email=a@a commit -q -am 'value 42'"
    ]


def test_a_story_moving_the_submodule_commit_is_owned_by_its_path(tmp_path: Path) -> None:
    stories = [story("lib", ["libs/util"]), story("after", ["after.txt"], ["lib"])]
    rules = [
        coder("lib", run=_bump_commands()),
        coder("after", {"after.txt": "x\n"}, run=["grep -q 42 libs/util/util.py"]),
    ]
    settings = f"gates = [{json.dumps(GATE)}]\njudgeRounds = 0\n"
    sc = Scenario.create(tmp_path, stories, rules, settings=settings)
    _add_submodule(sc, _library(tmp_path))
    recorded = git(sc.repo, "rev-parse", "HEAD:libs/util").strip()
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    moved = git(sc.repo, "rev-parse", "epic/ep:libs/util").strip()
    assert moved != recorded
    # The epic worktree follows the merged pointer: its submodule is at the story's new commit,
    # which a later story's worktree got too (its coder's grep passed).
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert git(epic_wt / "libs" / "util", "rev-parse", "HEAD").strip() == moved
    assert "42" in (epic_wt / "libs" / "util" / "util.py").read_text(encoding="utf-8")
    violations = [e.event for e in sc.events(result.run_id) if isinstance(e.event, PerimeterViolation)]
    assert violations == []


def test_moving_a_submodule_nobody_owns_is_flagged_and_restored(tmp_path: Path) -> None:
    stories = [story("ui", ["ui.txt"])]
    rules = [coder("ui", {"ui.txt": "u\n"}, run=_bump_commands())]
    sc = Scenario.create(tmp_path, stories, rules, settings="judgeRounds = 0\nmaxReviewRounds = 1\n")
    _add_submodule(sc, _library(tmp_path))
    recorded = git(sc.repo, "rev-parse", "HEAD:libs/util").strip()
    result = sc.run()
    kinds = {
        p.path: p.kind
        for e in sc.events(result.run_id)
        if isinstance(e.event, PerimeterViolation)
        for p in e.event.paths
    }
    assert kinds == {"libs/util": "outside"}
    assert git(sc.repo, "rev-parse", "epic/ep:libs/util").strip() == recorded


def test_files_left_inside_a_submodule_are_no_change(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a")])
    _add_submodule(sc, _library(tmp_path))
    repo = Repo(sc.repo)
    wt = repo.worktree_add(tmp_path / "wt", "story/x", "HEAD")
    assert (wt / "libs" / "util" / "util.py").is_file()
    # A gate importing from the submodule leaves bytecode there: no change of the story's.
    (wt / "libs" / "util" / "__pycache__").mkdir()
    (wt / "libs" / "util" / "__pycache__" / "util.pyc").write_bytes(b"x")
    assert repo.status_paths(wt) == []
    assert repo.changed_files(wt, "main") == []
    assert repo.commit_all(wt, "nothing") is None
    repo.worktree_remove(wt)
    assert not wt.exists()
    assert (
        wt.name
        not in subprocess.run(
            ["git", "worktree", "list"], cwd=sc.repo, capture_output=True, text=True, check=True
        ).stdout
    )


def test_a_submodule_no_local_copy_holds_and_no_url_serves_is_one_sentence(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a")])
    _add_submodule(sc, _library(tmp_path))
    # The user never checked it out here (a plain clone), and its upstream is gone.
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(sc.repo), str(clone))
    repo = Repo(clone)
    with pytest.raises(GitError) as raised:
        repo.worktree_add(tmp_path / "wt", "story/x", "HEAD")
    said = str(raised.value)
    assert said.startswith(f"could not check out the submodules of the worktree {tmp_path / 'wt'}: ")
    assert "git submodule update --init --recursive" in said and "\n" not in said
