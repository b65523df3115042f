"""Sparse worktrees (docs/repositories.md "Sparse worktrees"): with `[worktree] sparse = true` a
story's worktree checks out only the folders its perimeter names plus `sparseDirs`; the epic and
the merge train's candidates stay whole, the user's checkout is never made sparse, a reused
worktree takes the next story's folders, and a write outside the folders is a perimeter question
like any other. A sparse checkout of the user's own is never copied into flowd's worktrees."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flowd.engine.spares import Spares
from flowd.plan.cone import sparse_cone
from flowd.plan.model import Story
from flowd.vcs import sparse
from flowd.vcs.gitops import Repo
from tests.engine.scenario import FLOWD, Scenario, coder, git, story

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _story(owned: list[str], read: list[str] | None = None) -> Story:
    return Story.model_validate(
        {"id": "s", "title": "S", "owned": owned, "sharedReadOnly": read or [], "dependsOn": []}
    )


@pytest.mark.parametrize(
    ("owned", "read", "also", "kinds", "cone"),
    [
        # a file brings its folder; a folder itself; root files need no folder
        (["svc/a/x.py"], [], [], {"svc/a/x.py": False}, ["svc/a"]),
        (["svc/a"], [], [], {"svc/a": True}, ["svc/a"]),
        (["README.md"], [], [], {"README.md": False}, []),
        # not there yet: read by its shape
        (["svc/new/mod.py", "docs/guide"], [], [], {}, ["docs/guide", "svc/new"]),
        # a folder named like a file, known from the tree
        (["pkg/v1.2"], [], [], {"pkg/v1.2": True}, ["pkg/v1.2"]),
        # a submodule is a folder
        (["libs/util"], [], [], {"libs/util": True}, ["libs/util"]),
        # shared read-only entries and sparseDirs come too; inner folders fold into outer ones
        (["svc/a/x.py"], ["libs/common"], ["svc"], {"svc/a/x.py": False}, ["libs/common", "svc"]),
        # globs read as their folder
        (["web/**"], [], [], {"web": True}, ["web"]),
    ],
)
def test_the_cone_is_the_perimeters_folders(
    owned: list[str], read: list[str], also: list[str], kinds: dict[str, bool], cone: list[str]
) -> None:
    assert sparse_cone(_story(owned, read), also, kinds) == cone


def test_read_first_entries_come_too() -> None:
    story = Story.model_validate(
        {"id": "s", "title": "S", "owned": ["svc/a/x.py"], "readFirst": ["docs/api.md", "libs/common"]}
    )
    assert sparse_cone(story, [], {"libs/common": True}) == ["docs", "libs/common", "svc/a"]


def test_a_root_glob_needs_the_whole_tree() -> None:
    assert sparse_cone(_story(["**"]), [], {}) is None


FILES = {
    "svc/a/x.py": "A = 1\n",
    "svc/b/y.py": "B = 1\n",
    "libs/common/c.py": "C = 1\n",
    "big/f0.txt": "big\n",
    "big/deep/f1.txt": "big\n",
}


def test_a_sparse_run_checks_out_each_storys_folders_and_keeps_the_epic_whole(tmp_path: Path) -> None:
    stories = [
        story("a", ["svc/a"]),
        story("b", ["svc/b/y.py"], ["a"]),  # takes a's worktree once a has merged
        story("c", ["svc/c/z.py"]),
    ]
    sees = "test -f README.md && test -f libs/common/c.py && test ! -e big"
    rules = [
        coder("a", {"svc/a/x.py": "A = 2\n"}, run=[f"{sees} && test -f svc/a/x.py && test ! -e svc/b"]),
        # b's cone is svc/b: a's folder is gone from the reused worktree
        coder("b", {"svc/b/y.py": "B = 2\n"}, run=[f"{sees} && test ! -e svc/a && test -f svc/b/y.py"]),
        # c writes a tracked file outside its folders: put back like any stray
        coder("c", {"svc/c/z.py": "Z = 1\n", "big/f0.txt": "changed by c\n"}),
    ]
    settings = (
        'gates = ["test -f libs/common/c.py"]\njudgeRounds = 0\nconcurrency = 2\n'
        '[worktree]\nsparse = true\nsparseDirs = ["libs/common"]\n'
    )
    sc = Scenario.create(tmp_path, stories, rules, settings=settings, files=FILES)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b", "ep: merge story c"]
    assert git(sc.repo, "show", "epic/ep:svc/a/x.py") == "A = 2\n"
    assert git(sc.repo, "show", "epic/ep:big/f0.txt") == "big\n"  # c's stray did not merge
    said = [e.event.message for e in sc.events(result.run_id) if type(e.event).__name__ == "Info"]
    assert any("extensions.worktreeConfig" in m for m in said), said
    # The user's checkout and the epic worktree stay whole.
    assert git(sc.repo, "config", "--bool", "extensions.worktreeConfig").strip() == "true"
    assert not sparse.is_sparse(sc.repo)
    epic = sc.worktree_root / "ep" / "_epic"
    assert not sparse.is_sparse(epic) and (epic / "big" / "deep" / "f1.txt").is_file()
    assert git(sc.repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_spare_of_a_sparse_worktree_is_whole_again_for_a_whole_lane(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["svc/a"])], [], files=FILES)
    repo = Repo(sc.repo)
    sparse.enable_worktree_config(repo)
    lanes = tmp_path / "lanes"
    spares = Spares(repo, lanes)
    wt = lanes / "a"
    assert spares.take(wt, "story/ep/a", "main", cone=["svc/a"]) == "added"
    assert (wt / "svc" / "a" / "x.py").is_file() and not (wt / "big").exists()
    assert git(wt, "status", "--porcelain") == ""
    assert spares.give(wt, "story/ep/a") is None
    b = lanes / "b"
    assert spares.take(b, "story/ep/b", "main") == "reused"
    assert not sparse.is_sparse(b)
    assert (b / "big" / "deep" / "f1.txt").is_file() and (b / "svc" / "b" / "y.py").is_file()
    assert git(b, "status", "--porcelain") == ""


def test_a_sparse_lane_takes_a_sparse_spare_and_the_train_a_whole_one(tmp_path: Path) -> None:
    """docs/repositories.md "Worktree reuse": making a whole spare sparse would delete most of its
    files on the lane's path, so a sparse lane adds its own; the train's candidate, whole, takes
    the whole spare."""
    sc = Scenario.create(tmp_path, [story("a", ["svc/a"])], [], files=FILES)
    repo = Repo(sc.repo)
    sparse.enable_worktree_config(repo)
    lanes = tmp_path / "lanes"
    spares = Spares(repo, lanes)
    assert spares.take(lanes / "w", "story/ep/w", "main") == "added"  # whole
    assert spares.take(lanes / "s", "story/ep/s", "main", cone=["svc/a"]) == "added"
    assert spares.give(lanes / "w", "story/ep/w") is None
    assert spares.take(lanes / "a", "story/ep/a", "main", cone=["svc/a"]) == "added"  # not the whole spare
    assert spares.give(lanes / "s", "story/ep/s") is None
    assert spares.take(lanes / "b", "story/ep/b", "main", cone=["svc/b"]) == "reused"  # the sparse one
    assert sparse.is_sparse(lanes / "b") and (lanes / "b" / "svc" / "b" / "y.py").is_file()
    assert not (lanes / "b" / "svc" / "a").exists()
    candidate = spares.reserve(leave=0)
    assert candidate is not None and not sparse.is_sparse(candidate)
    assert (candidate / "big" / "deep" / "f1.txt").is_file()


def test_a_sparse_worktree_keeps_the_whole_index_below_the_size_where_a_sparse_one_pays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/repositories.md "Sparse worktrees": below `SPARSE_INDEX_FROM` files the index keeps
    every entry (those outside the cone skip-worktree); from it on, a folder outside the cone is
    one entry. Either way only the cone's files are written and `git status` is clean."""
    sc = Scenario.create(tmp_path, [story("a", ["svc/a"])], [], files=FILES)
    repo = Repo(sc.repo)
    sparse.enable_worktree_config(repo)
    tracked = len(git(sc.repo, "ls-files").splitlines())
    spares = Spares(repo, tmp_path / "lanes")
    for name, threshold, sparse_index in (("small", tracked + 1, "false"), ("big", tracked, "true")):
        monkeypatch.setattr(sparse, "SPARSE_INDEX_FROM", threshold)
        wt = tmp_path / "lanes" / name
        assert spares.take(wt, f"story/ep/{name}", "main", cone=["svc/a"]) == "added"
        assert git(wt, "config", "--worktree", "--bool", "index.sparse").strip() == sparse_index, name
        listed = git(wt, "ls-files", "--sparse").splitlines()
        assert ("big/" in listed) == (sparse_index == "true"), (name, listed)
        assert (wt / "svc" / "a" / "x.py").is_file() and not (wt / "big").exists()
        assert git(wt, "status", "--porcelain") == ""


@pytest.mark.parametrize("how", ["sparse-checkout set", "core.sparseCheckout in the shared config"])
@pytest.mark.parametrize("flowd_sparse", [False, True])
def test_your_own_sparse_checkout_stays_yours(tmp_path: Path, how: str, flowd_sparse: bool) -> None:
    """Your checkout holds only `svc/a` (as `git sparse-checkout set` makes it, per worktree, or
    the older way, in the shared config): git copied that into every worktree flowd added, and b,
    whose folder was not in it, failed ("could not diff the worktree ... advice.updateSparsePath").
    Now each story's worktree is whole, or flowd's own cone; yours keeps its patterns."""
    see_b = "test -f svc/b/y.py && test -f libs/common/c.py"
    rules = [coder("a", {"svc/a/new.py": "n\n"}), coder("b", {"svc/b/new.py": "m\n"}, run=[see_b])]
    settings = "judgeRounds = 0\n" + (
        '[worktree]\nsparse = true\nsparseDirs = ["libs/common"]\n' if flowd_sparse else ""
    )
    sc = Scenario.create(
        tmp_path, [story("a", ["svc/a/"]), story("b", ["svc/b/"])], rules, settings=settings, files=FILES
    )
    git(sc.repo, "add", "-A")
    git(sc.repo, *ID, "commit", "-q", "-m", "flow")
    if how == "sparse-checkout set":
        git(sc.repo, "sparse-checkout", "set", "svc/a", ".flow")
    else:
        git(sc.repo, "config", "core.sparseCheckout", "true")
        (sc.repo / ".git" / "info" / "sparse-checkout").write_text(
            "/*\n!/*/\n/svc/a/\n/.flow/\n", encoding="utf-8"
        )
        git(sc.repo, "read-tree", "-mu", "HEAD")
    patterns = git(sc.repo, "sparse-checkout", "list")
    assert not (sc.repo / "svc" / "b").exists()
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert {"svc/a/new.py", "svc/b/new.py"} <= set(sc.epic_files())
    assert git(sc.repo, "sparse-checkout", "list") == patterns and not (sc.repo / "svc" / "b").exists()
    epic = sc.worktree_root / "ep" / "_epic"
    assert (epic / "svc" / "b" / "y.py").is_file() and (epic / "big" / "deep" / "f1.txt").is_file()


def test_flow_outside_your_sparse_checkout_is_named(tmp_path: Path) -> None:
    """Your `.flow/` is tracked but your sparse checkout leaves it out: the run said only that the
    roster was missing (and would have run on default settings with a user roster). Now one
    sentence says why and how to bring it in, before anything is touched; with it in, the run runs."""
    rules = [coder("a", {"svc/a/new.py": "n\n"})]
    sc = Scenario.create(tmp_path, [story("a", ["svc/a/"])], rules, settings="judgeRounds = 0\n", files=FILES)
    git(sc.repo, "add", "-A")
    git(sc.repo, *ID, "commit", "-q", "-m", "flow")
    git(sc.repo, "sparse-checkout", "set", "svc/a")
    assert not (sc.repo / ".flow").exists()
    for argv in (["run", str(sc.plan_path)], ["roster", "check"]):
        done = subprocess.run([*FLOWD, *argv], cwd=sc.repo, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f"flowd: {sc.repo / '.flow'} is tracked but outside your sparse checkout, so flowd cannot "
            "read its roster and settings; add it with `git sparse-checkout add .flow`"
        ), done.stderr
    assert not sc.worktree_root.exists() and "epic/ep" not in git(sc.repo, "branch", "--list")
    git(sc.repo, "sparse-checkout", "add", ".flow")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
