"""A planner, reviewer or judge call never waits for a coder's slot: it would wait for ever when the
coders holding every slot are the very stories waiting on that call (a one-slot roster deadlocked
on its first story's task plan)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flowd.events import ExecutorLeased, ExecutorReleased
from tests.engine.scenario import Scenario, coder, story
from tests.test_roster import entry, make_pool, settle


async def test_a_call_borrows_when_every_slot_is_held_by_a_coder(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("solo"))
    held = await h.pool.lease("coder", label="s1")
    planner = await asyncio.wait_for(h.pool.lease("planner", label="s1"), 5)
    assert planner.borrowed and planner.executor_id == "solo" and planner.name == "solo (borrowed)"
    assert planner.executor is not held.executor  # its own connection: the coder's is not disturbed
    h.pool.release(planner)
    leased = h.of(ExecutorLeased)
    released = h.of(ExecutorReleased)
    assert leased[-1] == ExecutorLeased(executor="solo", role="planner", label="s1", borrowed=True)
    assert released[-1] == ExecutorReleased(executor="solo", role="planner", label="s1", borrowed=True)
    assert h.pool.free_slots("planner") == 0  # the coder still holds its slot


async def test_a_call_still_waits_for_another_call(tmp_path: Path) -> None:
    h = make_pool(tmp_path, entry("a", slots=2))
    coder_lease = await h.pool.lease("coder", label="s1")
    reviewer = await h.pool.lease("reviewer", label="s2")
    waiting = asyncio.create_task(h.pool.lease("judge", label="s3"))
    await settle()
    assert not waiting.done()  # a reviewer call ends soon: waiting for it is fine
    h.pool.release(reviewer)
    judge = await waiting
    assert not judge.borrowed and judge.name == "a#2"
    h.pool.release(judge)
    h.pool.release(coder_lease)


def test_a_one_slot_roster_runs_an_epic_to_the_end(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    sc = Scenario.create(
        tmp_path,
        stories,
        [coder("a", {"a.txt": "a\n"}), coder("b", {"b.txt": "b\n"})],
        settings="judgeRounds = 1\nmaxReviewRounds = 1\nstallTimeoutS = 30\nturnTimeoutS = 30\n",
        executors=[{"id": "solo", "script": "script.json", "slots": 1}],
    )
    result = sc.run()
    assert result.outcome == "done", result.view.lanes
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    borrowed = [e.event for e in sc.events(result.run_id) if isinstance(e.event, ExecutorLeased)]
    assert {e.role for e in borrowed if e.borrowed} >= {"planner", "judge"}
    assert not any(c.held for c in result.view.clones.values())
