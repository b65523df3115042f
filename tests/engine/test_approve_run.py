"""Approve before merge, end to end (docs/answers.md: `merge`): real git, a real `flowd run`
process, the bundled scripted agent, and `flowd answer` / `flowd revise` reaching the live run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from flowd.engine.spares import fill
from flowd.vcs.gitops import Repo
from tests.engine.scenario import FLOWD, Scenario, coder, git, kill_group, story
from tests.engine.test_pause_run import Event, answer, finish, read_until, status_of


@pytest.fixture(autouse=True)
def own_script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


# Only a prompt carrying the reviewer's words ("shout it") makes the coder write HELLO; the
# first version says hello. The answer's text reaches the coder as its revision task.
SHOUT = {"when": {"role": "coder", "story": "a", "prompt": "shout it"}, "writes": {"a.txt": "HELLO\n"}}
COMMENT = {"when": {"role": "coder", "story": "a", "prompt": "add a bang"}, "writes": {"a.txt": "HELLO!\n"}}


def approve_scenario(tmp_path: Path) -> Scenario:
    return Scenario.create(
        tmp_path,
        [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])],
        [SHOUT, COMMENT, coder("a", {"a.txt": "hello\n"}), coder("b", {"b.txt": "b\n"})],
    )


def lane_status(sc: Scenario, run_id: str, lane: str) -> str:
    out = subprocess.run(
        [*FLOWD, "status", "--json"], cwd=sc.repo, capture_output=True, text=True, check=True
    )
    run = next(r for r in json.loads(out.stdout)["runs"] if r["runId"] == run_id)
    return str(next(x["status"] for x in run["lanes"] if x["lane"] == lane))


def epic_text(sc: Scenario, path: str) -> str:
    return git(sc.repo, "show", f"epic/ep:{path}")


def of(seen: list[Event], kind: str, lane: str | None = None) -> list[Event]:
    return [e for e in seen if e["type"] == kind and (lane is None or e.get("lane") == lane)]


def test_changes_asked_then_approved_from_the_cli(tmp_path: Path) -> None:
    sc = approve_scenario(tmp_path)
    process = sc.spawn("--pause-on", "merge", "--run-id", "r1")
    seen: list[Event] = []
    try:
        asked = read_until(process, seen, "StoryPaused")
        assert asked["lane"] == "a" and asked["reason"] == "merge"
        assert asked["options"] == ["approve"] and "ready to merge" in asked["question"]
        assert lane_status(sc, "r1", "a") == "ready" and status_of(sc, "r1") == "paused"
        assert not of(seen, "StoryMerged")  # waiting: nothing merged, b not started
        assert not of(seen, "TaskStarted", "b")
        empty = answer(sc, "r1", "--story", "a", "  ")
        assert empty.returncode == 2 and "`approve`" in empty.stderr
        # Request changes: the text goes to the coder as a revision task; it asks again after.
        back = answer(sc, "r1", "--story", "a", "shout it, please")
        assert back.returncode == 0, back.stderr
        assert "goes back to its coder" in back.stdout
        again = read_until(process, seen, "StoryPaused")
        assert again["lane"] == "a" and again["reason"] == "merge"
        assert not of(seen, "StoryMerged")
        ok = answer(sc, "r1", "--story", "a", "approve")
        assert ok.returncode == 0, ok.stderr
        # b asks too once it is done; approved at once.
        asked_b = read_until(process, seen, "StoryPaused")
        assert asked_b["lane"] == "b"
        assert answer(sc, "r1", "--story", "b", "Approve").returncode == 0
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    assert epic_text(sc, "a.txt") == "HELLO\n"
    assert [e["effect"] for e in of(seen, "StoryAnswered")] == ["revise", "approve", "approve"]
    titles = [e["title"] for e in of(seen, "TaskStarted", "a")]
    assert titles[-1] == "Revision 1: make the changes asked for before merging"
    statuses = [e["status"] for e in seen if e["type"] == "StoryStatusChanged" and e["story"] == "a"]
    assert statuses == ["active", "ready", "active", "ready", "active", "done"]
    assert sc.merge_commits() == ["ep: merge story b", "ep: merge story a"]


def test_a_review_comment_sends_a_ready_story_back(tmp_path: Path) -> None:
    sc = approve_scenario(tmp_path)
    process = sc.spawn("--pause-on", "merge", "--run-id", "r2")
    seen: list[Event] = []
    try:
        read_until(process, seen, "StoryPaused")
        revise = subprocess.run(
            [*FLOWD, "revise", "r2", "a", "a.txt:1", "add a bang"],
            cwd=sc.repo,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert revise.returncode == 0, revise.stderr
        assert "asks for approval again" in revise.stdout
        again = read_until(process, seen, "StoryPaused")
        assert again["lane"] == "a"
        assert answer(sc, "r2", "--story", "a", "approve").returncode == 0
        read_until(process, seen, "StoryPaused")  # b
        assert answer(sc, "r2", "--story", "b", "approve").returncode == 0
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    assert epic_text(sc, "a.txt") == "HELLO!\n"
    assert [e["effect"] for e in of(seen, "StoryAnswered", "a")] == ["revise", "approve"]
    assert any(t["title"].startswith("Review comment 1: a.txt:1") for t in of(seen, "TaskStarted", "a"))


def test_a_run_killed_while_waiting_for_approval_stays_waiting(tmp_path: Path) -> None:
    sc = approve_scenario(tmp_path)
    first = sc.spawn("--pause-on", "merge", "--run-id", "r3")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
    finally:
        kill_group(first)
    second = sc.spawn("--run-id", "r3")
    again: list[Event] = []
    try:
        started = read_until(second, again, "RunStarted")
        assert started["pauseOn"] == ["merge"]
        assert status_of(sc, "r3") == "paused"
        assert lane_status(sc, "r3", "a") == "ready"
        assert answer(sc, "r3", "--story", "a", "approve").returncode == 0
        read_until(second, again, "StoryMerged")
        read_until(second, again, "StoryPaused")  # b
        assert answer(sc, "r3", "--story", "b", "approve").returncode == 0
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert not of(again, "StoryPaused", "a")  # not asked twice
    assert not of(again, "TaskStarted", "a")  # nothing redone, no judge again
    assert epic_text(sc, "a.txt") == "hello\n"


def test_an_approved_story_killed_in_its_merge_merges_on_resume_without_asking(tmp_path: Path) -> None:
    # The epic gate (only in the `_epic` worktree) waits for `go`: the run is killed while the
    # approved story's merge is behind its gates.
    go = tmp_path / "go"
    gate = f'test "$(basename "$(pwd)")" != _epic && exit 0; while [ ! -e {go} ]; do sleep 0.05; done'
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"])],
        [coder("a", {"a.txt": "hello\n"})],
        settings=f"gates = [{json.dumps(gate)}]\njudgeRounds = 0\nmaxReviewRounds = 1\n",
    )
    first = sc.spawn("--pause-on", "merge", "--run-id", "r4")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
        assert answer(sc, "r4", "--story", "a", "approve").returncode == 0
        while True:
            started = read_until(first, seen, "StageStarted")
            if started["stage"] == "story a: merge":
                break
    finally:
        kill_group(first)
    state = json.loads((sc.repo / ".flow/epics/ep/stories/a.json").read_text(encoding="utf-8"))
    assert state["approved"] == 1 and state["status"] != "merged"
    go.write_text("", encoding="utf-8")
    second = sc.spawn("--run-id", "r4")
    again: list[Event] = []
    try:
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert not of(again, "StoryPaused")  # approved once: not asked again
    assert not of(again, "TaskStarted", "a")
    assert sc.merge_commits() == ["ep: merge story a"]
    assert epic_text(sc, "a.txt") == "hello\n"


def test_a_new_run_of_the_epic_asks_again_for_the_approval_its_killed_run_left(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "hello\n"})])
    first = sc.spawn("--pause-on", "merge", "--run-id", "r6")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
    finally:
        kill_group(first)
    second = sc.spawn("--run-id", "r7")  # as `flowd run` again or the editor's resume
    again: list[Event] = []
    try:
        asked = read_until(second, again, "StoryPaused")
        assert asked["lane"] == "a" and asked["reason"] == "merge"
        assert lane_status(sc, "r7", "a") == "ready"
        assert answer(sc, "r7", "--story", "a", "approve").returncode == 0
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert not of(again, "TaskStarted", "a")
    assert epic_text(sc, "a.txt") == "hello\n"


def test_resumed_without_merge_in_pause_on_a_waiting_story_merges(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "hello\n"})])
    first = sc.spawn("--pause-on", "merge", "--run-id", "r8")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
    finally:
        kill_group(first)
    second = sc.spawn("--run-id", "r8", "--pause-on", "")  # the user no longer wants to approve
    again: list[Event] = []
    try:
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert not of(again, "StoryPaused")
    assert epic_text(sc, "a.txt") == "hello\n"


def test_no_lane_is_made_ahead_for_a_dependent_while_a_story_waits_for_approval(tmp_path: Path) -> None:
    # Spares kept from an earlier run (made as its after-run process makes them): a lane made
    # ahead would take one. Waiting for a person (maybe hours) makes none; entering the merge
    # train once approved does (engine/ahead.py).
    sc = approve_scenario(tmp_path)
    assert fill(Repo(sc.repo), sc.worktree_root, 4) == 4
    process = sc.spawn("--pause-on", "merge", "--run-id", "r1")
    seen: list[Event] = []
    try:
        assert read_until(process, seen, "StoryPaused")["lane"] == "a"
        # Made ahead, b's worktree would be there within a tenth of a second: watched for 2 s.
        watched = time.monotonic() + 2.0
        while time.monotonic() < watched:
            assert not (sc.worktree_root / "ep" / "b").exists(), "b's lane made while a waits"
            time.sleep(0.05)
        assert answer(sc, "r1", "--story", "a", "approve").returncode == 0
        assert read_until(process, seen, "StoryPaused")["lane"] == "b"
        assert answer(sc, "r1", "--story", "b", "approve").returncode == 0
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    said = [e["message"] for e in of(seen, "Info", "b")]
    assert any("its worktree is a used one" in m and "(reset)" in m for m in said), said
