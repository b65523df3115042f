"""Pause and ask, end to end (docs/answers.md): real git, real `flowd run` processes, the bundled
scripted agent, and `flowd answer` reaching the live run through its inbox."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story

Event = dict[str, Any]


@pytest.fixture(autouse=True)
def own_script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted agent's `times` counts live in a state directory keyed by script path and run
    id; pytest reuses temp paths across sessions, so each test counts in a directory of its own."""
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def read_until(process: subprocess.Popen[bytes], seen: list[Event], wanted: str) -> Event:
    """Read the run's JSON event lines until an event of type `wanted` (the run ending first fails)."""
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, f"the run ended before {wanted}: {[e['type'] for e in seen]}"
        event = json.loads(line)["event"]
        seen.append(event)
        if event["type"] == wanted:
            return event


def answer(sc: Scenario, run_id: str, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWD, "answer", run_id, *words], cwd=sc.repo, capture_output=True, text=True, timeout=60
    )


def finish(process: subprocess.Popen[bytes], seen: list[Event]) -> int:
    assert process.stdout is not None
    seen += [json.loads(line)["event"] for line in process.stdout.read().splitlines()]
    return process.wait(timeout=60)


def status_of(sc: Scenario, run_id: str) -> str:
    out = subprocess.run(
        [*FLOWD, "status", "--json"], cwd=sc.repo, capture_output=True, text=True, check=True
    )
    return str(next(r["status"] for r in json.loads(out.stdout)["runs"] if r["runId"] == run_id))


def test_a_spent_budget_pauses_the_run_and_raise_goes_on(tmp_path: Path) -> None:
    usage = {"input": 1000, "output": 100, "costUsd": 0.5}
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])],
        [coder("a", {"a.txt": "a"}, usage=usage), coder("b", {"b.txt": "b"}, usage=usage)],
    )
    process = sc.spawn("--budget-usd", "0.4", "--pause-on", "budget", "--run-id", "r1")
    seen: list[Event] = []
    try:
        paused = read_until(process, seen, "StoryPaused")
        assert "lane" not in paused and paused["reason"] == "budget"
        assert paused["options"] == ["raise 5", "stop"] and "$0.40" in paused["question"]
        # Bad answers change nothing, in one sentence each.
        bad = answer(sc, "r1", "raise", "abc")
        assert bad.returncode == 2 and "positive number of USD" in bad.stderr
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
        wrong = answer(sc, "r1", "--story", "zz", "stop")
        assert wrong.returncode == 2 and "has no story 'zz'" in wrong.stderr
        assert status_of(sc, "r1") == "paused"
        ok = answer(sc, "r1", "raise", "5")
        assert ok.returncode == 0, ok.stderr
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    answered = [e for e in seen if e["type"] == "StoryAnswered"]
    assert answered == [
        {"type": "StoryAnswered", "answer": "raise 5", "by": "cli", "effect": "raise", "raiseUsd": 5.0}
    ]
    assert sc.merge_commits() == ["ep: merge story b", "ep: merge story a"]
    assert seen[-1]["type"] == "RunEnded" and seen[-1]["outcome"] == "done"


BLOCKED = {"reply": "I cannot go on.\nBLOCKED_ON: which greeting the product wants", "times": 1}
TOLD = {"when": {"role": "coder", "story": "a", "prompt": "say HOWDY"}, "writes": {"a.txt": "howdy\n"}}


def blocked_scenario(tmp_path: Path) -> Scenario:
    # Only a prompt carrying the answer writes the file; the coder blocks once per run before
    # that. Without the answer in the prompt the default coder changes nothing and a.txt never
    # reaches the epic.
    return Scenario.create(
        tmp_path,
        [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])],
        [TOLD, coder("a", **BLOCKED), coder("b", {"b.txt": "b"})],
    )


def test_a_blocked_story_pauses_and_the_answer_reaches_its_next_prompt(tmp_path: Path) -> None:
    sc = blocked_scenario(tmp_path)
    process = sc.spawn("--pause-on", "blocked,budget", "--run-id", "r2")
    seen: list[Event] = []
    try:
        paused = read_until(process, seen, "StoryPaused")
        assert paused["lane"] == "a" and paused["reason"] == "blocked"
        assert "which greeting the product wants" in paused["question"]
        assert status_of(sc, "r2") == "paused"
        # The clone is released while the story waits.
        leased = [
            e
            for e in seen
            if e["type"] == "ExecutorLeased" and e.get("label") == "a" and e["role"] == "coder"
        ]
        released = [
            e
            for e in seen
            if e["type"] == "ExecutorReleased" and e.get("label") == "a" and e["role"] == "coder"
        ]
        assert len(leased) == len(released) == 1
        not_paused = answer(sc, "r2", "--story", "b", "hello")
        assert (
            not_paused.returncode == 2 and "Story b of run r2 is not paused; paused: a." in not_paused.stderr
        )
        ok = answer(sc, "r2", "--story", "a", "say HOWDY to everyone")
        assert ok.returncode == 0, ok.stderr
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    assert (sc.repo / "a.txt").exists() is False  # the user's checkout is untouched
    assert "a.txt" in sc.epic_files() and "b.txt" in sc.epic_files()
    assert [e for e in seen if e["type"] == "StoryAnswered"] == [
        {
            "type": "StoryAnswered",
            "lane": "a",
            "answer": "say HOWDY to everyone",
            "by": "cli",
            "effect": "tell",
        }
    ]


def test_a_run_killed_while_paused_resumes_paused(tmp_path: Path) -> None:
    sc = blocked_scenario(tmp_path)
    first = sc.spawn("--pause-on", "blocked", "--run-id", "r3")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
    finally:
        kill_group(first)
    # Resumed without --pause-on: the run keeps its own, and its unanswered pause.
    second = sc.spawn("--run-id", "r3")
    again: list[Event] = []
    try:
        started = read_until(second, again, "RunStarted")
        assert started["pauseOn"] == ["blocked"]
        assert status_of(sc, "r3") == "paused"
        ok = answer(sc, "r3", "--story", "a", "say HOWDY")
        assert ok.returncode == 0, ok.stderr
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert not any(e["type"] == "StoryPaused" for e in again)  # not asked twice
    assert "a.txt" in sc.epic_files()


def test_an_answer_to_a_run_with_nothing_paused_is_exit_2_and_one_sentence(tmp_path: Path) -> None:
    slow = coder("a", {"a.txt": "a"}, delayMs=60_000)
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [slow])
    process = sc.spawn("--pause-on", "budget,blocked,noExecutor", "--run-id", "r4")
    seen: list[Event] = []
    try:
        read_until(process, seen, "TaskStarted")
        refused = answer(sc, "r4", "raise", "5")
        assert refused.returncode == 2
        assert refused.stderr == "flowd: Run r4 has nothing paused.\n"
        cancel = subprocess.run(
            [*FLOWD, "cancel", "r4"], cwd=sc.repo, capture_output=True, text=True, timeout=60
        )
        assert cancel.returncode == 0
        assert process.wait(timeout=60) == 130
    finally:
        kill_group(process)
    ended = answer(sc, "r4", "raise", "5")
    assert ended.returncode == 2 and "is not running" in ended.stderr


def test_a_new_run_of_the_epic_takes_over_the_pause_its_killed_run_left(tmp_path: Path) -> None:
    sc = blocked_scenario(tmp_path)
    first = sc.spawn("--pause-on", "blocked", "--run-id", "r5")
    seen: list[Event] = []
    try:
        read_until(first, seen, "StoryPaused")
    finally:
        kill_group(first)
    # Another run id (as `flowd run` again or the editor's resume makes): it asks again in its
    # own trace, paused on what the killed run paused on.
    second = sc.spawn("--run-id", "r6")
    again: list[Event] = []
    try:
        asked = read_until(second, again, "StoryPaused")
        assert asked["lane"] == "a" and "which greeting" in asked["question"]
        assert next(e for e in again if e["type"] == "RunStarted")["pauseOn"] == ["blocked"]
        assert not any(e["type"] == "TaskStarted" and e["lane"] == "a" for e in again)
        assert answer(sc, "r5", "--story", "a", "say HOWDY").returncode == 2  # the old run is gone
        ok = answer(sc, "r6", "--story", "a", "say HOWDY")
        assert ok.returncode == 0, ok.stderr
        assert finish(second, again) == 0
    finally:
        kill_group(second)
    assert "a.txt" in sc.epic_files()
    kept = sc.repo / ".flow/epics/ep/stories/a.answers.md"
    assert kept.read_text(encoding="utf-8") == "- say HOWDY\n"


@pytest.mark.slow
def test_no_executor_pauses_the_story_and_wait_takes_the_executor_back(tmp_path: Path) -> None:
    # The roster's only executor fails to sign in once: it is out for the run, so no executor can
    # serve story a's coder. `wait` takes it back and the story goes on.
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"])],
        [{"when": {"role": "coder", "story": "a"}, "fail": "auth", "times": 1}, coder("a", {"a.txt": "a\n"})],
    )
    process = sc.spawn("--pause-on", "noExecutor", "--run-id", "r9")
    seen: list[Event] = []
    try:
        paused = read_until(process, seen, "StoryPaused")
        assert paused["lane"] == "a" and paused["reason"] == "noExecutor"
        assert paused["options"] == ["wait", "stop"]
        assert any(e["type"] == "ExecutorExcluded" and e["executor"] == "demo" for e in seen)
        assert status_of(sc, "r9") == "paused"
        ok = answer(sc, "r9", "--story", "a", "wait")
        assert ok.returncode == 0, ok.stderr
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    assert [e for e in seen if e["type"] == "StoryAnswered"] == [
        {"type": "StoryAnswered", "lane": "a", "answer": "wait", "by": "cli", "effect": "wait"}
    ]
    assert "a.txt" in sc.epic_files()
    assert seen[-1]["type"] == "RunEnded" and seen[-1]["outcome"] == "done"
