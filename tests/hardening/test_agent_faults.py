"""Agent faults through the real ACP client and the scripted agent: each ends in its designed state
with a clear reason while the rest of the epic goes on.

Each epic packs several faulty stories (one fault each) beside healthy ones, so one run shows both
that the fault is handled and that the others are not disturbed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from flowd.engine.runner import RunResult
from flowd.events.model import AssistantMessage, ExecutorExcluded, ExecutorHandedOver, StoryMerged
from tests.engine.scenario import Scenario, coder, story

FAST = "judgeRounds = 1\nmaxReviewRounds = 1\nconcurrency = 8\nstallTimeoutS = 2\nturnTimeoutS = 30\n"
HUGE = 3 * 1024 * 1024


@pytest.fixture(autouse=True)
def _script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def two_executors(
    root: Path,
    stories: list[dict[str, Any]],
    alpha: list[dict[str, Any]],
    shared: list[dict[str, Any]],
    settings: str = FAST,
) -> Scenario:
    """`alpha` (tried first, with its own faulty rules ahead of the shared ones) and `beta` (healthy)."""
    sc = Scenario.create(
        root,
        stories,
        shared,
        settings=settings,
        executors=[
            {"id": "alpha", "script": "alpha.json", "slots": 8, "priority": 1},
            {"id": "beta", "script": "beta.json", "slots": 8, "priority": 2},
        ],
    )
    sc.write_script(alpha + shared, "alpha.json")
    sc.write_script(shared, "beta.json")
    return sc


def of(sc: Scenario, result: RunResult, kind: type[Any]) -> list[Any]:
    return [e.event for e in sc.events(result.run_id) if isinstance(e.event, kind)]


def test_crash_hang_garbage_and_huge_replies_each_end_as_designed(tmp_path: Path) -> None:
    names = ["crashy", "hangy", "bad-plan", "bad-review", "bad-judge", "chatty", "fine"]
    # hangy, then crashy, start first (the longest descriptions: the largest estimates), so both
    # lease alpha's coders before crashy's crash excludes it, whatever the machine's speed; later
    # stories may find alpha full of other stories' planner turns and take beta from the start.
    first = {
        "hangy": "Build hangy: its coder hangs on alpha, and it starts first, before any crash.",
        "crashy": "Build crashy: its coder crashes on alpha; it starts second.",
    }
    stories = [story(n, [f"{n}.txt"], **({"description": first[n]} if n in first else {})) for n in names]
    alpha = [
        {"when": {"role": "coder", "story": "crashy"}, "fail": "crash"},
        {"when": {"role": "coder", "story": "hangy"}, "fail": "hang"},
    ]
    shared = [
        {"when": {"role": "planner", "story": "bad-plan"}, "reply": "Sure! Here is my plan: do it."},
        {"when": {"role": "reviewer", "story": "bad-review"}, "reply": "<html>502 Bad Gateway</html>"},
        {"when": {"role": "judge", "story": "bad-judge"}, "reply": '{"issues": [{"severity": "nope"'},
        coder("chatty", {"chatty.txt": "c\n"}, reply="blah " * (HUGE // 5)),
        *(coder(n, {f"{n}.txt": f"{n}\n"}) for n in names if n != "chatty"),
    ]
    sc = two_executors(tmp_path, stories, alpha, shared)
    result = sc.run()
    lanes = result.view.lanes
    assert result.outcome == "failed" and result.exit_code == 1
    # Crash and hang: the coder is handed over to beta and the story is done there.
    handed = {h.label: h for h in of(sc, result, ExecutorHandedOver)}
    assert lanes["crashy"].status == "done" and lanes["hangy"].status == "done"
    assert (handed["crashy"].from_, handed["crashy"].to) == ("alpha", "beta")
    assert "exited" in handed["crashy"].reason
    assert (handed["hangy"].from_, handed["hangy"].to) == ("alpha", "beta")
    assert "nothing heard from the agent for 2s" in handed["hangy"].reason
    # Garbage from planner, reviewer, judge: asked again once, then the story fails saying why.
    assert lanes["bad-plan"].status == "failed"
    assert (lanes["bad-plan"].reason or "").startswith("the planner's reply could not be used twice")
    assert (lanes["bad-review"].reason or "").startswith("the reviewer's reply could not be used twice")
    assert (lanes["bad-judge"].reason or "").startswith("the judge's reply could not be used twice")
    # A 3 MB reply: the story is done and the trace stays small (AssistantMessage is truncated).
    assert lanes["chatty"].status == "done" and lanes["fine"].status == "done"
    longest = max(len(m.text) for m in of(sc, result, AssistantMessage))
    assert longest <= 601
    trace = sc.repo / ".flow" / "runs" / result.run_id / "trace.jsonl"
    assert trace.stat().st_size < 200_000
    merged = sorted(m.lane for m in of(sc, result, StoryMerged))
    assert merged == ["chatty", "crashy", "fine", "hangy"]
    assert not any(c.held for c in result.view.clones.values())


def test_a_burst_of_rate_and_usage_limits_excludes_the_executor_and_the_stories_finish_on_the_other(
    tmp_path: Path,
) -> None:
    names = ["rl-a", "rl-b", "ul", "plain"]
    stories = [story(n, [f"{n}.txt"]) for n in names]
    faults = {"rl-a": "rate_limit", "rl-b": "rate_limit", "ul": "usage_limit"}
    # Each faulty turn fails only once all three are on alpha: the first failure excludes alpha, and
    # a story still planning then would take beta and never meet its fault (as on a loaded machine).
    release = tmp_path / "release"
    hold = "while [ ! -e '{release}' ]; do sleep 0.05; done"
    alpha = [
        {
            "when": {"role": "coder", "story": n},
            "run": [f": held {n}; {hold.format(release=release)}"],
            "fail": f,
        }
        for n, f in faults.items()
    ]
    shared = [coder(n, {f"{n}.txt": f"{n}\n"}) for n in names]
    # Held turns say nothing: the stall clock must outlast the hold.
    settings = FAST.replace("stallTimeoutS = 2", "stallTimeoutS = 120")
    sc = two_executors(tmp_path, stories, alpha, shared, settings)
    releaser = threading.Thread(target=_release_when_held, args=(list(faults), release), daemon=True)
    releaser.start()
    try:
        result = sc.run()
    finally:
        release.touch()
        releaser.join()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    excluded = of(sc, result, ExecutorExcluded)
    assert excluded and {e.executor for e in excluded} == {"alpha"}
    reasons = " | ".join(e.reason for e in excluded)
    assert "rate limit" in reasons and "usage limit" in reasons
    handed = {h.label for h in of(sc, result, ExecutorHandedOver) if h.to == "beta"}
    assert {"rl-a", "rl-b", "ul"} <= handed
    # The usage limit outlives the run: the next run will not try alpha before it resets.
    state = json.loads((sc.repo / ".flow" / "roster-state.json").read_text(encoding="utf-8"))
    assert [e["executor"] for e in state["exclusions"]] == ["alpha"]
    assert sorted(sc.merge_commits()) == sorted(f"ep: merge story {n}" for n in names)


def _release_when_held(names: list[str], release: Path, timeout_s: float = 120.0) -> None:
    """Create `release` once a held command (`: held <name>; ...`) runs for each of `names`, each
    in its lane's coder turn on alpha (found by its command line in /proc), or after `timeout_s`."""
    marks = {f": held {n};".encode() for n in names}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not release.exists():
        seen = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    cmdline = handle.read()
            except OSError:
                continue
            seen |= {mark for mark in marks if mark in cmdline}
        if seen == marks:
            break
        time.sleep(0.05)
    release.touch()


def test_with_no_other_executor_an_auth_failure_halts_the_run_saying_why(tmp_path: Path) -> None:
    stories = [story("locked", ["l.txt"]), story("after", ["a.txt"], ["locked"])]
    rules = [{"when": {"role": "coder", "story": "locked"}, "fail": "auth"}, coder("after", {"a.txt": "a"})]
    sc = Scenario.create(
        tmp_path,
        stories,
        rules,
        settings=FAST,
        executors=[{"id": "solo", "script": "script.json", "slots": 2}],
    )
    result = sc.run()
    assert result.outcome == "halted" and result.exit_code == 3
    lane = result.view.lanes["locked"]
    assert lane.status == "waiting"
    assert "no executor can take the coder role: solo is" in (lane.reason or "")
    assert "Not logged in" in (lane.reason or "")
    assert result.view.lanes["after"].status == "waiting"
    assert sc.merge_commits() == []
