"""Worktree reuse (docs/repositories.md "Worktree reuse"), on real repositories: a spare worktree
taken by the next lane carries nothing of the previous one, a killed reuse is finished on the
next take, a run reuses a finished story's worktree, and what no lane takes is removed after the
run has ended."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from flowd.base.layout import SPARE_DIR, TRASH_DIR
from flowd.engine.spares import Spares, reap, reap_in_background, waiting
from flowd.vcs.bootstrapped import bootstrapped, mark_bootstrapped
from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, kill_group, story

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]
LOCAL = ["-c", "protocol.file.allow=always"]


def _repo(tmp_path: Path) -> Repo:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n", encoding="utf-8")
    (root / ".gitignore").write_text("build/\n.env\n", encoding="utf-8")
    (root / ".worktreeinclude").write_text(".env\n", encoding="utf-8")
    (root / ".env").write_text("KEY=user\n", encoding="utf-8")
    git(root, "init", "-q", "-b", "main")
    git(root, *ID, "add", "-A")
    git(root, *ID, "commit", "-q", "-m", "init")
    return Repo(root)


def _files(wt: Path) -> dict[str, str]:
    """Every file of a worktree but git's own, with its text."""
    found = {}
    for path in sorted(wt.rglob("*")):
        rel = path.relative_to(wt).as_posix()
        if path.is_file() and ".git" not in Path(rel).parts:
            found[rel] = path.read_text(encoding="utf-8")
    return found


def _used(repo: Repo, lanes: Path) -> tuple[Spares, Path]:
    """Story `a`'s worktree after it worked: a commit, an edit, untracked and ignored files, a
    conflicted merge left half-way, a bootstrapped copy the agent changed; then given back."""
    spares = Spares(repo, lanes)
    wt = lanes / "a"
    assert spares.take(wt, "story/ep/a", "main") == "added"
    (wt / "a.txt").write_text("a\n", encoding="utf-8")
    git(wt, *ID, "add", "-A")
    git(wt, *ID, "commit", "-q", "-m", "a")
    git(repo.root, "branch", "-q", "other", "main")
    shutil.copy(repo.root / ".env", wt / ".env")
    mark_bootstrapped(wt, [".env"])
    return spares, wt


def test_a_reused_worktree_carries_nothing_of_the_previous_lane(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    git(wt, *ID, "commit", "-q", "--allow-empty", "-m", "more")
    assert spares.give(wt) is None  # clean: a spare
    spare = next((lanes / SPARE_DIR).iterdir())
    assert not wt.exists() and (spare / "a.txt").is_file()
    # What a killed lane could leave behind in it, were it handed on as it is.
    (spare / "src" / "app.py").write_text("edited\n", encoding="utf-8")
    (spare / "stray.txt").write_text("untracked\n", encoding="utf-8")
    (spare / "build").mkdir()
    (spare / "build" / "out.o").write_text("ignored\n", encoding="utf-8")
    (spare / ".env").write_text("KEY=agent\n", encoding="utf-8")
    (spare / ".flow").mkdir()
    (spare / ".flow" / "junk").write_text("x\n", encoding="utf-8")
    b = lanes / "b"
    assert spares.take(b, "story/ep/b", "main", repo.root / ".worktreeinclude") == "reused"
    assert git(b, "rev-parse", "HEAD").strip() == repo.head("main")
    assert git(b, "symbolic-ref", "--short", "HEAD").strip() == "story/ep/b"
    # The user's .env copy is kept for bootstrap to compare (it rewrites what differs); the
    # rest is exactly a fresh checkout of main.
    assert _files(b) == {".env": "KEY=agent\n", ".gitignore": "build/\n.env\n", ".worktreeinclude": ".env\n",
                         "src/app.py": "x = 1\n"}  # fmt: skip
    assert bootstrapped(b) == frozenset({".env"})
    assert git(b, "status", "--porcelain", "--ignored", "--untracked-files=all").split() == ["!!", ".env"]
    # A lane whose include no longer lists the copy gets none of it.
    (repo.root / ".worktreeinclude").write_text("", encoding="utf-8")
    git(b, "update-ref", "--no-deref", "HEAD", "HEAD")
    spares.give(b, "story/ep/b")
    assert not repo.branch_exists("story/ep/b")
    c = lanes / "c"
    assert spares.take(c, "story/ep/c", "main", repo.root / ".worktreeinclude") == "reused"
    assert ".env" not in _files(c) and bootstrapped(c) == frozenset()


def test_uncommitted_work_is_never_made_a_spare(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    (wt / "work.txt").write_text("someone's\n", encoding="utf-8")
    kept = spares.give(wt)
    assert kept is not None and "uncommitted" in kept and (wt / "work.txt").is_file()
    # A task's worktree is thrown away as a removal would: forced.
    assert spares.give(wt, "story/ep/a", force=True) is None and not repo.branch_exists("story/ep/a")


def _take_while_given_back(spares: Spares, wt: Path, lanes: Path) -> tuple[str, str | None]:
    """Story b's `take` while another thread gives `wt` back a moment later, as a merged story's
    lane ends after its dependents launched (engine/story.py): (how b was made, what the give said)."""
    spares.expect()
    made: list[str] = []
    taker = threading.Thread(target=lambda: made.append(spares.take(lanes / "b", "story/ep/b", "main")))
    taker.start()
    try:
        # The give comes only once b's take waits for it (on a busy machine the take may start late).
        deadline = time.monotonic() + 30
        while spares.waiting == 0 and taker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert spares.waiting == 1, "b's take did not wait for the worktree on its way back"
        try:
            said = spares.give(wt)
        finally:
            spares.arrived()
    finally:
        taker.join()
    return made[0], said


def test_a_take_waits_for_a_worktree_on_its_way_back(tmp_path: Path) -> None:
    # With no spare free, the next lane takes the one on its way back once it comes, rather than
    # adding a worktree.
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    git(wt, *ID, "commit", "-q", "--allow-empty", "-m", "more")
    assert _take_while_given_back(spares, wt, lanes) == ("reused", None)
    assert not wt.exists() and [w.path.name for w in repo.worktrees()] == ["repo", "b"]


def test_a_give_in_flight_that_brings_no_spare_lets_the_take_add_one(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    (wt / "work.txt").write_text("someone's\n", encoding="utf-8")  # uncommitted work: no spare
    how, kept = _take_while_given_back(spares, wt, lanes)
    assert how == "added" and kept is not None and "uncommitted" in kept
    assert (wt / "work.txt").is_file()


def test_a_merge_left_half_way_is_gone_after_reuse(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    (repo.root / "src" / "app.py").write_text("x = 2\n", encoding="utf-8")
    git(repo.root, *ID, "commit", "-qam", "main moves")
    (wt / "src" / "app.py").write_text("x = 3\n", encoding="utf-8")
    git(wt, *ID, "commit", "-qam", "a moves")
    proc = subprocess.run(["git", *ID, "merge", "main"], cwd=wt, capture_output=True, text=True)
    assert proc.returncode != 0 and (Path(git(wt, "rev-parse", "--git-dir").strip()) / "MERGE_HEAD").exists()
    assert spares.give(wt, force=True) is None
    b = lanes / "b"
    assert spares.take(b, "story/ep/b", "other") == "reused"
    assert not repo.merge_in_progress(b) and git(b, "status", "--porcelain") == ""
    assert (b / "src" / "app.py").read_text(encoding="utf-8") == "x = 1\n"


def test_a_submodule_change_is_gone_and_a_worktree_with_submodules_is_never_moved(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "util.py").write_text("V = 1\n", encoding="utf-8")
    git(lib, "init", "-q", "-b", "main")
    git(lib, *ID, "add", "-A")
    git(lib, *ID, "commit", "-q", "-m", "lib")
    git(repo.root, *LOCAL, "submodule", "add", "-q", str(lib), "libs/util")
    git(repo.root, *ID, "commit", "-q", "-m", "sub")
    lanes = tmp_path / "repo.flowd" / "ep"
    spares = Spares(repo, lanes)
    wt = lanes / "a"
    spares.take(wt, "story/ep/a", "main")
    # The lane edits the submodule's files, adds one and commits inside it (a pointer change).
    (wt / "libs" / "util" / "util.py").write_text("V = 2\n", encoding="utf-8")
    (wt / "libs" / "util" / "new.py").write_text("new\n", encoding="utf-8")
    git(wt / "libs" / "util", *ID, "commit", "-qam", "inside")
    (wt / "libs" / "util" / "util.py").write_text("V = 3\n", encoding="utf-8")
    # A killed run's story worktree at its own path is reset in place (no move: git refuses one
    # with submodules), its submodule back at the recorded commit with nothing of its own.
    assert spares.take(wt, "story/ep/a", "main") == "reset"
    assert (wt / "libs" / "util" / "util.py").read_text(encoding="utf-8") == "V = 1\n"
    assert not (wt / "libs" / "util" / "new.py").exists()
    assert git(wt, "status", "--porcelain") == ""
    # Given back, it goes to the trash, not to the spares.
    assert spares.give(wt) is None
    assert not wt.exists() and not (lanes / SPARE_DIR).exists() and any((lanes / TRASH_DIR).iterdir())
    reap(lanes)
    assert not (lanes / TRASH_DIR).exists()
    assert [w for w in repo.worktrees() if w.path != repo.root] == []


def test_a_reuse_killed_half_way_is_finished_by_the_next_take(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares, wt = _used(repo, lanes)
    assert spares.give(wt) is None
    spare = next((lanes / SPARE_DIR).iterdir())
    # Killed inside `git worktree move`: the folder renamed, git's record not yet following it.
    b = lanes / "b"
    os.rename(spare, b)
    (b / "left.txt").write_text("x\n", encoding="utf-8")
    again = Spares(repo, lanes)  # the next run: no memory of the spare
    again.recover()
    assert again.take(b, "story/ep/b", "main") == "reset"
    assert git(b, "symbolic-ref", "--short", "HEAD").strip() == "story/ep/b" and not (b / "left.txt").exists()
    # Killed inside the checkout: git's index.lock left behind, files half-written.
    lock = Path(git(b, "rev-parse", "--path-format=absolute", "--git-path", "index.lock").strip())
    lock.write_text("", encoding="utf-8")
    (b / "src" / "app.py").unlink()
    assert Spares(repo, lanes).take(b, "story/ep/b", "main") == "reset"
    assert not lock.exists() and git(b, "status", "--porcelain") == ""


def test_a_killed_runs_spares_are_kept_when_whole_and_trashed_when_not(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares = Spares(repo, lanes)
    for name in ("a", "b"):
        spares.take(lanes / name, f"story/ep/{name}", "main")
    for name in ("a", "b"):
        assert spares.give(lanes / name) is None
    whole, broken = sorted((lanes / SPARE_DIR).iterdir())
    os.rename(broken, lanes / SPARE_DIR / "zz-moved-by-hand")  # git's record now points nowhere
    again = Spares(repo, lanes)
    again.recover()
    assert [p.name for p in (lanes / SPARE_DIR).iterdir()] == [whole.name]
    assert again.take(lanes / "c", "story/ep/c", "main") == "reused"
    assert again.take(lanes / "d", "story/ep/d", "main") == "added"
    reap(lanes)
    listed = {os.path.realpath(w.path) for w in repo.worktrees()}
    assert listed == {os.path.realpath(p) for p in (repo.root, lanes / "c", lanes / "d")}


def test_the_background_removal_empties_the_trash(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares = Spares(repo, lanes)
    spares.take(lanes / "a", "story/ep/a", "main")
    spares.give(lanes / "a")
    spares.retire()
    assert not (lanes / SPARE_DIR).exists() and (lanes / TRASH_DIR).is_dir()
    proc = reap_in_background(lanes)
    assert proc is not None
    assert proc.wait(timeout=60) == 0
    assert not (lanes / TRASH_DIR).exists()
    assert [w.path for w in repo.worktrees()] == [repo.root]


def test_a_run_hands_a_merged_storys_worktree_to_the_next_story(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    # `a`'s coder leaves an ignored build output and an untracked scratch file behind.
    rules = [
        coder("a", {"a.txt": "a\n"}, run=["mkdir -p build && echo o > build/out.o"]),
        coder("b", {"b.txt": "b\n"}, run=["test ! -e build/out.o && test ! -e a-scratch.txt"]),
    ]
    sc = Scenario.create(tmp_path, stories, rules, settings='gates = ["true"]\njudgeRounds = 0\n')
    (sc.repo / ".gitignore").write_text("build/\n", encoding="utf-8")
    git(sc.repo, *ID, "add", "-A")
    git(sc.repo, *ID, "commit", "-q", "-m", "ignore build")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    said = [e.event.message for e in sc.events(result.run_id) if type(e.event).__name__ == "Info"]
    assert any("its worktree is a used one" in m and "reused" in m for m in said), said
    assert git(sc.repo, "ls-tree", "-r", "--name-only", "story/ep/b").split().count("b.txt") == 1
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    # Nothing is left: the spare went to the trash and the trash was emptied before `run_epic`
    # returned (in-process callers; `flowd run` leaves that to a process of its own).
    assert sc.lanes_left() == ["_epic"]
    assert [w.path.name for w in Repo(sc.repo).worktrees()] == ["repo", "_epic"]


def test_flowd_clean_removes_what_a_killed_run_left_in_spares_and_trash(tmp_path: Path) -> None:
    from flowd.engine.clean import apply_clean, plan_clean

    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares = Spares(repo, lanes)
    for name in ("a", "b"):
        spares.take(lanes / name, f"story/ep/{name}", "main")
    spares.give(lanes / "a")
    spares.give(lanes / "b")
    spares.retire()  # one into the trash
    spares = Spares(repo, lanes)
    spares.take(lanes / "c", "story/ep/c", "main")
    spares.give(lanes / "c")  # and one left a spare, as a SIGKILL leaves it
    plan = plan_clean(repo)
    assert plan.empty_trash == [lanes] and [p.parent.name for p in plan.remove_worktrees] == [SPARE_DIR]
    assert apply_clean(repo, plan) == []
    assert not (lanes / SPARE_DIR).exists() and not (lanes / TRASH_DIR).exists()
    assert [w.path for w in repo.worktrees()] == [repo.root]


def test_a_run_after_one_killed_mid_reuse_finishes_it_and_carries_nothing_over(tmp_path: Path) -> None:
    """What a run SIGKILLed while handing spares out leaves: one spare whole in `_spare`, and one
    renamed to story `b`'s path with git's record not following (killed inside `git worktree
    move`, before `b` had any state), holding a previous lane's leftovers. The next run takes the
    first and repairs and resets the second; neither story's branch holds anything of them."""
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder("a", {"a.txt": "a\n"}), coder("b", {"b.txt": "b\n"}, run=["test ! -e junk.txt"])]
    sc = Scenario.create(tmp_path, stories, rules, settings='gates = ["true"]\njudgeRounds = 0\n')
    lanes = sc.worktree_root / "ep"
    for name in ("whole", "moved"):
        git(sc.repo, "worktree", "add", "-q", "--detach", str(lanes / SPARE_DIR / name), "main")
    os.rename(lanes / SPARE_DIR / "moved", lanes / "b")
    (lanes / "b" / "junk.txt").write_text("a previous lane's\n", encoding="utf-8")
    (lanes / "b" / "README.md").write_text("edited by a previous lane\n", encoding="utf-8")
    result = sc.run(concurrency=1)
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    said = [e.event.message for e in sc.events(result.run_id) if type(e.event).__name__ == "Info"]
    assert any("(reset)" in m for m in said) and any("(reused)" in m for m in said), said
    for name in ("a", "b"):
        base = json.loads((sc.repo / ".flow/epics/ep/stories" / f"{name}.json").read_text())["base"]
        changed = git(sc.repo, "diff", "--name-only", base, f"story/ep/{name}").split()
        # Its own file (and, caught up, the other story's), nothing of the previous lane's.
        assert f"{name}.txt" in changed and not {"junk.txt", "README.md"} & set(changed), (name, changed)
    assert "junk.txt" not in sc.epic_files()
    assert sc.lanes_left() == ["_epic"]


def _kept_after_a_run(repo: Repo, lanes: Path, keep: int, names: tuple[str, ...]) -> list[Path]:
    """What a run of `lanes`' epic whose lanes `names` finished leaves kept, with `keepSpares = keep`."""
    spares = Spares(repo, lanes, keep=keep)
    for name in names:
        spares.take(lanes / name, f"story/{lanes.name}/{name}", "main")
    for name in names:
        assert spares.give(lanes / name) is None
    spares.retire()
    return sorted((lanes.parent / SPARE_DIR).iterdir())


def test_a_run_keeps_spares_for_the_next_run_of_any_epic(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    root = tmp_path / "repo.flowd"
    (kept,) = _kept_after_a_run(repo, root / "ep", 1, ("a", "b"))  # one kept, one trashed
    assert os.path.realpath(kept) in {os.path.realpath(w.path) for w in repo.worktrees()}
    assert git(kept, "status", "--porcelain") == "" and len(list((root / "ep" / TRASH_DIR).iterdir())) == 1
    inode = kept.stat().st_ino
    (kept / "stray.txt").write_text("left in a kept spare\n", encoding="utf-8")
    later = Spares(repo, root / "other")
    later.recover()
    assert not (root / SPARE_DIR).exists()
    wt = root / "other" / "x"
    assert later.take(wt, "story/other/x", "main") == "reused"
    assert wt.stat().st_ino == inode and not (wt / "stray.txt").exists()
    assert git(wt, "rev-parse", "HEAD").strip() == repo.head("main")
    assert later.take(root / "other" / "y", "story/other/y", "main") == "added"
    assert later.give(wt) is None
    later.retire()  # keepSpares 0: nothing kept
    assert not (root / SPARE_DIR).exists() and (root / "other" / TRASH_DIR).is_dir()


def test_a_kept_spare_a_kill_cut_is_trashed_and_another_repositorys_is_left(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    root = tmp_path / "repo.flowd"
    whole, cut = _kept_after_a_run(repo, root / "ep", 3, ("a", "b"))
    os.rename(cut, root / SPARE_DIR / "zz-cut")  # git's record of it now points nowhere
    other = _repo(tmp_path / "elsewhere")
    foreign = root / SPARE_DIR / "foreign"
    git(other.root, "worktree", "add", "-q", "--detach", str(foreign), "main")
    later = Spares(repo, root / "ep2")
    later.recover()
    assert [p.name for p in (root / SPARE_DIR).iterdir()] == ["foreign"]
    assert [p.name for p in (root / "ep2" / SPARE_DIR).iterdir()] == [whole.name]
    assert len(list((root / "ep2" / TRASH_DIR).iterdir())) == 1
    assert os.path.realpath(foreign) in {os.path.realpath(w.path) for w in other.worktrees()}


def test_kept_spares_serve_the_next_epics_run_and_flowd_clean_removes_them(tmp_path: Path) -> None:
    """Run 1 (no spares yet) keeps its two lanes' worktrees and makes up a third after it ended;
    run 2, of another epic, resets all three (its two lanes and the train's first candidate,
    which becomes its epic worktree) and leaves three again; `flowd clean` removes them."""
    from flowd.engine.clean import apply_clean, plan_clean

    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder(s, {f"{s}.txt": f"{s}\n"}) for s in ("a", "b", "c", "d")]
    settings = 'gates = ["true"]\njudgeRounds = 0\n[worktree]\nkeepSpares = 3\n'
    sc = Scenario.create(tmp_path, stories, rules, settings=settings)
    first = sc.run(concurrency=2)
    assert first.outcome == "done", {k: v.reason for k, v in first.view.lanes.items()}
    kept = sc.worktree_root / SPARE_DIR
    inodes = {p.stat().st_ino for p in kept.iterdir()}
    assert len(inodes) == 3 and sc.lanes_left() == ["_epic"]
    repo = Repo(sc.repo)
    listed = {os.path.realpath(w.path): w for w in repo.worktrees()}
    for spare in kept.iterdir():  # whole, detached, clean, registered where they are
        assert listed[os.path.realpath(spare)].branch is None and git(spare, "status", "--porcelain") == ""
        assert (spare / "README.md").is_file()
    second = sc.repo / "ep2.epic.json"
    plan = {"epicId": "ep2", "epic": "next", "stories": [story("c", ["c.txt"]), story("d", ["d.txt"])]}
    second.write_text(json.dumps(plan), encoding="utf-8")
    sc.plan_path = second
    result = sc.run(concurrency=2)
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    said = [e.event.message for e in sc.events(result.run_id) if type(e.event).__name__ == "Info"]
    assert sum("its worktree is a used one" in m and "(reused)" in m for m in said) == 2, said
    assert sorted(sc.epic_files("epic/ep2")) == ["README.md", "c.txt", "d.txt"]
    epic_wt = sc.worktree_root / "ep2" / "_epic"
    assert epic_wt.stat().st_ino in inodes and sorted(p.name for p in epic_wt.iterdir()) == [
        ".git", "README.md", "c.txt", "d.txt",
    ]  # fmt: skip
    again = {p.stat().st_ino for p in kept.iterdir()}
    assert len(again) == 3 and len(again & inodes) == 2  # c's and d's, and one made up
    cleaning = plan_clean(repo)
    assert sorted(p.parent for p in cleaning.remove_worktrees if p.parent.name == SPARE_DIR) == [kept] * 3
    assert apply_clean(repo, cleaning) == []
    assert not kept.exists()
    assert sorted(w.path.name for w in repo.worktrees()) == ["_epic", "_epic", "repo"]


def test_a_fill_a_kill_cut_is_cleared_and_one_still_filling_is_never_claimed(tmp_path: Path) -> None:
    from flowd.engine.spares import fill, kept_root

    repo = _repo(tmp_path)
    root = tmp_path / "repo.flowd"
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        for pid in (dead.pid, live.pid):  # a killed fill's half, and one filling right now
            staged = kept_root(root) / f".fill-{pid}" / "x"
            git(repo.root, "worktree", "add", "-q", "--detach", str(staged), "main")
        later = Spares(repo, root / "ep")
        later.recover()  # neither is taken
        assert later.reserve(leave=0) is None
        assert fill(repo, root, 2) == 2
    finally:
        live.kill()
        live.wait()
    waiting = sorted(p for p in kept_root(root).iterdir() if not p.name.startswith("."))
    assert sorted(p.name for p in kept_root(root).iterdir() if p.name.startswith(".")) == [
        f".fill-{live.pid}"
    ]
    listed = {os.path.realpath(w.path) for w in repo.worktrees()}
    staged = kept_root(root) / f".fill-{live.pid}" / "x"
    assert listed == {os.path.realpath(p) for p in (repo.root, staged, *waiting)} and len(waiting) == 2
    assert fill(repo, root, 2) == 0  # already two waiting


def test_flowd_run_makes_the_kept_spares_up_in_its_after_run_process(tmp_path: Path) -> None:
    """`flowd run` (a real process) returns before the pool is made up: its after-run process
    (`python -m flowd.engine.spares`) empties the trash and adds the spares the new epic
    worktree used up, in a staging folder that is gone once it is done."""
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [coder(s, {f"{s}.txt": f"{s}\n"}) for s in ("a", "b")]
    settings = 'gates = ["true"]\njudgeRounds = 0\n[worktree]\nkeepSpares = 3\n'
    sc = Scenario.create(tmp_path, stories, rules, settings=settings)
    process = sc.spawn()
    try:
        _, err = process.communicate(timeout=180)
    finally:
        kill_group(process)
    assert process.returncode == 0, err.decode()
    kept = sc.worktree_root / SPARE_DIR
    assert sc.lanes_left() == ["_epic"]
    deadline = time.monotonic() + 60
    while (len(waiting(kept)) < 3 or any(kept.glob(".fill-*"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(waiting(kept)) == 3 and not any(kept.glob(".fill-*"))
    listed = {os.path.realpath(w.path): w for w in Repo(sc.repo).worktrees()}
    for spare in waiting(kept):
        assert listed[os.path.realpath(spare)].branch is None and git(spare, "status", "--porcelain") == ""


def test_a_kept_spares_index_is_written_after_its_files(tmp_path: Path) -> None:
    """git rereads every file not older than its index (in whole seconds) on each status; a
    checkout writes both in the same second. A kept spare's index is written again a second
    later, so every scan of the worktree it becomes trusts the files' stat."""
    from flowd.engine.spares import fill, kept_root
    from flowd.vcs.gitcli import private_git_dir

    repo = _repo(tmp_path)
    root = tmp_path / "repo.flowd"
    assert fill(repo, root, 2) == 2
    for spare in waiting(kept_root(root)):
        admin = private_git_dir(spare)
        assert admin is not None
        index = int((admin / "index").stat().st_mtime)
        files = [p for p in spare.rglob("*") if p.is_file() and p.name != ".git"]
        assert files and all(int(p.stat().st_mtime) < index for p in files), spare


def test_emptying_the_trash_deletes_no_folder_a_lanes_git_file_names(tmp_path: Path) -> None:
    """A lane rewrote its worktree's `.git` to name a folder of the user's called `worktrees/…`:
    the trash is emptied, that folder stays (docs/sandbox.md "flowd's own git")."""
    repo = _repo(tmp_path)
    lanes = tmp_path / "repo.flowd" / "ep"
    spares = Spares(repo, lanes)
    wt = lanes / "a"
    spares.take(wt, "story/ep/a", "main")
    precious = tmp_path / "projects" / "worktrees" / "precious"
    precious.mkdir(parents=True)
    (precious / "notes.txt").write_text("the user's\n", encoding="utf-8")
    (wt / ".git").write_text(f"gitdir: {precious}\n", encoding="utf-8")
    (lanes / TRASH_DIR).mkdir(parents=True, exist_ok=True)
    os.rename(wt, lanes / TRASH_DIR / "a")
    reap(lanes)
    assert (precious / "notes.txt").read_text(encoding="utf-8") == "the user's\n"
    assert not (lanes / TRASH_DIR).exists()
