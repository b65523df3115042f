"""Git and disk faults: shared files two stories both touch, a user committing to the epic branch
mid-run, a story worktree deleted by hand, a locked index, a trace that can no longer be written.
Each ends with a clear reason, the epic clean, and nothing lost."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from bench.kill_resume import Runner
from flowd.events.model import PerimeterViolation
from tests.engine.scenario import FLOWD, Scenario, coder, git, kill_group, story

SETTINGS = "judgeRounds = 0\nmaxReviewRounds = 1\n"


@pytest.fixture(autouse=True)
def _script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def user_commit(worktree: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (worktree / name).write_text(text, encoding="utf-8")
    git(worktree, "add", "-A")
    git(worktree, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-q", "-m", message)


def test_a_file_two_disjoint_stories_both_write_never_reaches_the_epic(tmp_path: Path) -> None:
    rules = [coder(s, {f"{s}.txt": s, "shared.txt": f"{s} was here\n"}) for s in ("a", "b")]
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"]), story("b", ["b.txt"])], rules, settings=SETTINGS)
    result = sc.run()
    assert result.outcome == "done"
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    assert "shared.txt" not in sc.epic_files()
    restored = {
        e.event.lane
        for e in sc.events(result.run_id)
        if isinstance(e.event, PerimeterViolation) and e.event.action == "restored"
    }
    assert restored == {"a", "b"}


def test_a_users_commit_on_the_epic_mid_run_is_kept_and_a_clash_with_a_story_fails_it_typed(
    tmp_path: Path,
) -> None:
    stories = [story("slow", ["s.txt"]), story("calm", ["c.txt"])]
    rules = [
        coder("slow", {"s.txt": "the story's version\n"}, delayMs=2500),
        coder("calm", {"c.txt": "calm\n"}, delayMs=2500),
    ]
    sc = Scenario.create(tmp_path, stories, rules, settings=SETTINGS + "concurrency = 2\n")
    epic = sc.worktree_root / "ep" / "_epic"
    runner = Runner(sc, dict(os.environ))
    try:
        assert runner.until(lambda e: e["type"] == "TaskStarted", 2, timeout=60) > 0
        # The user works on the epic branch while both stories are mid-turn: one commit of their own
        # file, one that clashes with a file story `slow` owns.
        user_commit(epic, {"NOTES.md": "user notes\n"}, "user: notes")
        user_commit(epic, {"s.txt": "the user's version\n"}, "user: s.txt")
        code = runner.finish(timeout=120)
    finally:
        runner.kill()
    assert code == 1, runner.stderr.decode()
    log = git(sc.repo, "log", "--format=%s", "epic/ep").splitlines()
    assert "user: notes" in log and "user: s.txt" in log and "ep: merge story calm" in log
    assert "ep: merge story slow" not in log
    assert git(sc.repo, "show", "epic/ep:s.txt") == "the user's version\n"
    assert git(sc.repo, "show", "story/ep/slow:s.txt") == "the story's version\n"  # nothing lost
    assert git(epic, "status", "--porcelain") == ""
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    slow = next(s for s in report["stories"] if s["id"] == "slow")
    assert slow["status"] == "failed"
    assert "conflicted on paths story 'slow' owns (s.txt)" in json.dumps(slow)


def test_a_deleted_worktree_is_repaired_and_stale_git_locks_cleared(tmp_path: Path) -> None:
    flag = tmp_path / "gates-red"
    flag.touch()
    gate = f"sh -c '[ ! -f b.txt ] && [ ! -f c.txt ] || [ ! -e {flag} ]'"
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"]), story("c", ["c.txt"])]
    rules = [coder(s, {f"{s}.txt": f"{s}\n"}) for s in ("a", "b", "c")]
    sc = Scenario.create(tmp_path, stories, rules, settings=SETTINGS + f"gates = [{json.dumps(gate)}]\n")
    first = sc.run()
    assert first.view.lanes["a"].status == "done"
    assert first.view.lanes["b"].status == "failed" and first.view.lanes["c"].status == "failed"
    wt_b, wt_c = sc.worktree_root / "ep" / "b", sc.worktree_root / "ep" / "c"
    shutil.rmtree(wt_b)  # by hand, between runs
    # What a git killed inside `git commit` leaves: the index's lock, HEAD's, the branch's.
    where = git(
        wt_c, "rev-parse", "--path-format=absolute", "--git-path", "index.lock", "--git-path", "HEAD.lock"
    )
    lock, head_lock = (Path(line) for line in where.split())
    branch_lock = sc.repo / ".git" / "refs" / "heads" / "story" / "ep" / "c.lock"
    for stale in (lock, head_lock, branch_lock):
        stale.write_text("", encoding="utf-8")
    flag.unlink()
    second = sc.run()
    assert second.outcome == "done", {k: v.reason for k, v in second.view.lanes.items()}
    infos = [
        e.event.message for e in sc.events(second.run_id) if e.event.type == "Info" and e.event.lane == "c"
    ]
    assert any(m.startswith(f"removed {lock}, {head_lock}, {branch_lock}") for m in infos), infos
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b", "ep: merge story c"]


@pytest.mark.parametrize("mode", ["detect", "enforce"])
def test_an_index_locked_mid_run_fails_the_story_clearly_and_loses_nothing(tmp_path: Path, mode: str) -> None:
    """Under `detect` the lane's git shares flowd's index: its `index.lock` fails the story in one
    sentence. Under `enforce` the lane's git has an index of its own, in its lane repository
    (docs/sandbox.md "The lane repository"): the lock stays there and the story finishes."""
    lock_it = 'touch "$(git rev-parse --path-format=absolute --git-path index.lock)"'
    rules = [coder("locky", {"l.txt": "work\n"}, run=[lock_it]), coder("fine", {"f.txt": "f\n"})]
    sc = Scenario.create(
        tmp_path,
        [story("locky", ["l.txt"]), story("fine", ["f.txt"])],
        rules,
        settings=SETTINGS + f'[sandbox]\nmode = "{mode}"\n',
    )
    result = sc.run()
    assert result.view.lanes["fine"].status == "done"
    reason = result.view.lanes["locky"].reason or ""
    if mode == "enforce":
        assert result.view.lanes["locky"].status == "done", reason
        assert "l.txt" in git(sc.repo, "ls-tree", "-r", "--name-only", "epic/ep")
        return
    assert result.view.lanes["locky"].status == "failed"
    assert "index.lock': File exists" in reason, reason
    assert (sc.worktree_root / "ep" / "locky" / "l.txt").read_text(encoding="utf-8") == "work\n"


def test_a_trace_that_cannot_be_written_halts_in_one_sentence_and_the_rerun_finishes(tmp_path: Path) -> None:
    """A real write failure: a file-size limit on the runner (EFBIG, as a full disk gives ENOSPC)."""
    names = ["a", "b", "c", "d"]
    rules = [coder(n, {f"{n}.txt": n}, delayMs=200) for n in names]
    sc = Scenario.create(tmp_path, [story(n, [f"{n}.txt"]) for n in names], rules, settings=SETTINGS)

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (15_000, 15_000))

    process = subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path)],
        cwd=sc.repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=small_files,
        start_new_session=True,
    )
    try:
        _, err = process.communicate(timeout=120)
    finally:
        kill_group(process)
    stderr = err.decode()
    assert process.returncode == 3, stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("flowd: ")]
    assert len(lines) == 1 and "could not write the trace" in lines[0] and "File too large" in lines[0]
    assert not (sc.repo / ".flow/epics/ep/lock").exists()
    for path in (sc.repo / ".flow").rglob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))
    again = subprocess.run([*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    assert sorted(sc.merge_commits()) == sorted(f"ep: merge story {n}" for n in names)


def test_a_worktree_removal_killed_half_way_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """`git worktree remove` deletes the files, then git's record: a kill in between leaves a record
    whose directory is gone or half gone. The next run finishes the clean-up of merged stories."""
    names = ["gone", "half", "partial", "edited"]
    sc = Scenario.create(
        tmp_path, [story(n, [f"{n}.txt"]) for n in names], [coder(n, {f"{n}.txt": n}) for n in names]
    )
    assert sc.run().outcome == "done"
    ep = sc.worktree_root / "ep"
    for name in names:  # put back what the killed removals would have left
        git(sc.repo, "worktree", "add", "-q", str(ep / name), f"story/ep/{name}")
    shutil.rmtree(ep / "gone")
    (ep / "half" / ".git").unlink()
    (ep / "partial" / "README.md").unlink()  # git had deleted some of the files
    (ep / "edited" / "edited.txt").write_text("someone's edit\n", encoding="utf-8")  # not ours to drop
    assert sc.run().outcome == "done"
    listed = git(sc.repo, "worktree", "list", "--porcelain")
    assert "/ep/gone" not in listed and "/ep/half" not in listed and "/ep/partial" not in listed
    assert sorted(p.name for p in ep.iterdir()) == ["_epic", "edited"]
    assert (ep / "edited" / "edited.txt").read_text(encoding="utf-8") == "someone's edit\n"
    assert sorted(sc.merge_commits()) == sorted(f"ep: merge story {n}" for n in names)
