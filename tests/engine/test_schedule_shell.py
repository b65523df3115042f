"""The scheduler's shell over real git and the scripted agent: fail-fast stops the running story,
holds the rest, and the next run picks everything up (the machine's rules are in test_core_*)."""

from __future__ import annotations

from pathlib import Path

from flowd.events.model import RunEnded, StoryStatusChanged
from tests.engine.scenario import Scenario, coder, story


def test_fail_fast_cancels_the_running_story_holds_the_rest_and_the_next_run_finishes(tmp_path: Path) -> None:
    stories = [
        story("a", ["a.txt"], description="FAILING on purpose"),
        story("b", ["b.txt"]),
        story("c", ["c.txt"]),
        story("d", ["d.txt"], ["a"]),
    ]
    rules = [
        {"when": {"role": "coder", "story": "a", "prompt": "FAILING"}, "fail": "error"},
        # b is still in its turn when a fails: the cancel ends the scripted delay early.
        coder("b", {"b.txt": "b"}, delayMs=20000),
        coder("c", {"c.txt": "c"}),
        coder("d", {"d.txt": "d"}),
    ]
    settings = "concurrency = 2\nfailFast = true\njudgeRounds = 0\n"
    sc = Scenario.create(tmp_path, stories, rules, settings=settings)
    first = sc.run()
    assert (first.outcome, first.exit_code) == ("failed", 1)
    lanes = first.view.lanes
    assert lanes["a"].status == "failed"
    assert (lanes["b"].status, lanes["b"].reason) == ("waiting", "cancelled; resumable")
    assert (lanes["c"].status, lanes["c"].reason) == ("waiting", "not started: fail-fast after a")
    assert (lanes["d"].status, lanes["d"].reason) == ("waiting", "waiting for a")
    events = [e.event for e in sc.events(first.run_id)]
    assert [e.reason for e in events if isinstance(e, RunEnded)] == ["story a failed (fail-fast)"]
    started = [e.story for e in events if isinstance(e, StoryStatusChanged) and e.status == "active"]
    assert started == ["a", "b"]  # a ranks first (d depends on it), then b in plan order; c never starts
    assert sc.merge_commits() == []

    # The plan entry is fixed and b answers at once: the next run merges every story once.
    sc.write_script([coder(s["id"], {s["owned"][0]: s["id"]}) for s in stories])
    text = sc.plan_path.read_text(encoding="utf-8")
    sc.plan_path.write_text(text.replace("FAILING on purpose", "Build a."), encoding="utf-8")
    second = sc.run()
    assert second.outcome == "done"
    assert sorted(sc.merge_commits()) == [f"ep: merge story {s}" for s in "abcd"]
