"""The scheduler's rules as a table: events in, instructions out; no git, no agents, no loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from flowd.engine.core.scheduler import (
    Cancelled,
    End,
    Event,
    Instruction,
    LaneFreed,
    Launch,
    MakeAhead,
    MarkWaiting,
    Poll,
    ReportBudget,
    Say,
    Scheduler,
    StopAll,
    StoryFinished,
    StoryStopped,
    TasksDone,
)
from flowd.plan.model import Story, StoryPlan

SAY_SLOT = "epic ep: {} running (concurrency {}); {} ready, waiting for a slot"


def plan(*stories: tuple[str, Sequence[str]]) -> StoryPlan:
    return StoryPlan(
        epic_id="ep",
        stories=[Story(id=s, title=s, owned=[f"{s}.txt"], depends_on=list(deps)) for s, deps in stories],
    )


# a ← b ← c, and d alone
CHAIN = plan(("a", []), ("b", ["a"]), ("c", ["b"]), ("d", []))
# base ← left, right ← top
DIAMOND = plan(("base", []), ("left", ["base"]), ("right", ["base"]), ("top", ["left", "right"]))
FLAT = plan(("x", []), ("y", []), ("z", []))


def machine(
    p: StoryPlan, concurrency: int = 4, fail_fast: bool = False, rank: Mapping[str, float] | None = None
) -> Scheduler:
    return Scheduler(p, rank or {}, concurrency, fail_fast)


def launched(instructions: list[Instruction]) -> list[str]:
    return [i.story for i in instructions if isinstance(i, Launch)]


def waiting(instructions: list[Instruction]) -> dict[str, str]:
    return {i.story: i.reason for i in instructions if isinstance(i, MarkWaiting)}


def ended(instructions: list[Instruction]) -> End | None:
    return next((i for i in instructions if isinstance(i, End)), None)


@pytest.mark.parametrize(
    ("p", "concurrency", "slots", "rank", "expected"),
    [
        (FLAT, 4, 4, {}, ["x", "y", "z"]),  # plan order when ranks tie
        (FLAT, 2, 4, {}, ["x", "y"]),  # concurrency caps
        (FLAT, 4, 1, {}, ["x"]),  # coder slots cap
        (FLAT, 4, 0, {}, ["x"]),  # a roster with no coder slot still runs one story
        (FLAT, 3, 2, {"z": 3.0, "y": 2.0}, ["z", "y"]),  # longest chain first
        (CHAIN, 4, 4, {}, ["a", "d"]),  # only stories whose dependencies are done
        (CHAIN, 1, 4, {"a": 3.0, "d": 1.0}, ["a"]),
        (CHAIN, 1, 4, {"a": 1.0, "d": 5.0}, ["d"]),
        (DIAMOND, 4, 4, {}, ["base"]),
    ],
)
def test_first_poll_launches_by_rank_up_to_the_free_slots(
    p: StoryPlan, concurrency: int, slots: int, rank: dict[str, float], expected: list[str]
) -> None:
    m = machine(p, concurrency, rank=rank)
    out = m.handle(Poll(coder_slots=slots))
    assert launched(out) == expected
    assert m.running == expected
    assert ended(out) is None


@pytest.mark.parametrize(
    ("concurrency", "events", "expected"),
    [
        # one slot frees: the next story takes it
        (2, [StoryFinished("x", "done")], ["z"]),
        # nothing freed: nothing launched
        (2, [], []),
        # a failed story frees its slot too (its dependents aside)
        (2, [StoryFinished("x", "failed")], ["z"]),
        # a waiting story frees its slot
        (2, [StoryFinished("y", "waiting")], ["z"]),
    ],
)
def test_a_freed_slot_launches_the_next_ready_story(
    concurrency: int, events: list[Event], expected: list[str]
) -> None:
    m = machine(FLAT, concurrency)
    m.handle(Poll(coder_slots=9))
    m.handle(*events)
    assert launched(m.handle(Poll(coder_slots=9))) == expected


def test_dependents_launch_when_their_dependencies_are_done() -> None:
    m = machine(DIAMOND)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("base", "done"))
    assert launched(m.handle(Poll(coder_slots=4))) == ["left", "right"]
    m.handle(StoryFinished("left", "done"))
    assert launched(m.handle(Poll(coder_slots=4))) == []  # top still needs right
    m.handle(StoryFinished("right", "done"))
    assert launched(m.handle(Poll(coder_slots=4))) == ["top"]
    m.handle(StoryFinished("top", "done"))
    assert m.handle(Poll(coder_slots=4)) == [End("done")]


def test_the_summary_is_said_once_while_it_stays_the_same() -> None:
    m = machine(FLAT, 1)
    first = m.handle(Poll(coder_slots=4))
    assert [i for i in first if isinstance(i, Say)] == [Say(SAY_SLOT.format(1, 1, 2))]
    assert m.handle(Poll(coder_slots=4)) == []  # nothing new: no second line
    m.handle(StoryFinished("x", "done"))
    again = m.handle(Poll(coder_slots=4))
    assert again == [Launch("y"), Say(SAY_SLOT.format(1, 1, 1))]


def test_no_summary_when_every_ready_story_launched() -> None:
    out = machine(FLAT, 3).handle(Poll(coder_slots=3))
    assert not any(isinstance(i, Say) for i in out)


@pytest.mark.parametrize(
    ("p", "story", "status", "expected"),
    [
        (CHAIN, "a", "failed", {"b": "waiting for a", "c": "waiting for a"}),  # transitive
        (CHAIN, "a", "waiting", {"b": "waiting for a", "c": "waiting for a"}),
        (CHAIN, "d", "failed", {}),  # nothing depends on d
        (CHAIN, "a", "done", {}),
        (DIAMOND, "left", "failed", {"top": "waiting for left"}),
        (
            DIAMOND,
            "base",
            "failed",
            {"left": "waiting for base", "right": "waiting for base", "top": "waiting for base"},
        ),
    ],
)
def test_a_story_that_did_not_finish_holds_its_dependents(
    p: StoryPlan, story: str, status: str, expected: dict[str, str]
) -> None:
    m = machine(p)
    m.handle(Poll(coder_slots=4))
    if story not in m.running:  # reach the story through its dependencies
        for s in p.ids[: p.ids.index(story)]:
            if s in m.running:
                m.handle(StoryFinished(s, "done"))
                m.handle(Poll(coder_slots=4))
    assert story in m.running
    out = m.handle(StoryFinished(story, status))  # type: ignore[arg-type]
    assert waiting(out) == expected
    assert not any(isinstance(i, StopAll) for i in out)


def test_a_dependent_already_waiting_is_not_marked_twice() -> None:
    m = machine(DIAMOND)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("base", "done"))
    m.handle(Poll(coder_slots=4))
    assert waiting(m.handle(StoryFinished("left", "failed"))) == {"top": "waiting for left"}
    assert waiting(m.handle(StoryFinished("right", "failed"))) == {}


def test_a_run_with_a_failed_story_and_no_fail_fast_ends_failed_after_the_rest() -> None:
    m = machine(CHAIN)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("a", "failed"))
    assert m.handle(Poll(coder_slots=4)) == []  # d still runs
    m.handle(StoryFinished("d", "done"))
    assert m.handle(Poll(coder_slots=4)) == [End("failed")]


def test_fail_fast_stops_the_running_stories_and_holds_the_rest() -> None:
    m = machine(plan(("a", []), ("b", []), ("c", []), ("d", ["a"])), concurrency=2, fail_fast=True)
    m.handle(Poll(coder_slots=4))
    out = m.handle(StoryFinished("a", "failed"))
    assert out == [MarkWaiting("d", "waiting for a"), StopAll()]
    assert m.handle(StoryStopped("b", "cancelled")) == [MarkWaiting("b", "cancelled; resumable")]
    assert m.handle(Poll(coder_slots=4)) == [
        MarkWaiting("c", "not started: fail-fast after a"),
        End("failed", "story a failed (fail-fast)"),
    ]


def test_fail_fast_records_every_story_of_a_batch_before_stopping() -> None:
    m = machine(plan(("a", []), ("b", []), ("c", []), ("e", ["b"])), concurrency=3, fail_fast=True)
    m.handle(Poll(coder_slots=4))
    out = m.handle(StoryFinished("a", "failed"), StoryFinished("b", "failed"))
    # b's dependent is marked by b's own rule, and only then are the others stopped
    assert out == [MarkWaiting("e", "waiting for b"), StopAll()]
    assert m.failed_fast == "a"


@pytest.mark.parametrize("status", ["waiting", "done"])
def test_fail_fast_ignores_stories_that_did_not_fail(status: str) -> None:
    m = machine(FLAT, fail_fast=True)
    m.handle(Poll(coder_slots=4))
    out = m.handle(StoryFinished("x", status))  # type: ignore[arg-type]
    assert not any(isinstance(i, StopAll) for i in out)


def test_fail_fast_with_nothing_else_running_settles_on_the_next_poll() -> None:
    m = machine(CHAIN, concurrency=1, fail_fast=True)
    m.handle(Poll(coder_slots=4))
    assert m.handle(StoryFinished("a", "failed")) == [
        MarkWaiting("b", "waiting for a"),
        MarkWaiting("c", "waiting for a"),
    ]
    assert m.handle(Poll(coder_slots=4)) == [
        MarkWaiting("d", "not started: fail-fast after a"),
        End("failed", "story a failed (fail-fast)"),
    ]


def test_a_stories_halt_stops_launching_and_lets_the_running_finish() -> None:
    m = machine(plan(("a", []), ("b", []), ("c", [])), concurrency=2)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("a", "waiting", halt="no executor serves the coder role"))
    assert m.handle(Poll(coder_slots=4)) == []  # b still runs, c does not start
    m.handle(StoryFinished("b", "done"))
    assert m.handle(Poll(coder_slots=4)) == [
        Say("epic ep: stopped launching stories — no executor serves the coder role"),
        MarkWaiting("c", "not started: no executor serves the coder role"),
        End("halted", "no executor serves the coder role"),
    ]


def test_the_first_halt_is_the_runs_reason() -> None:
    m = machine(FLAT)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("x", "waiting", halt="first"), StoryFinished("y", "waiting", halt="second"))
    m.handle(StoryFinished("z", "done"))
    assert ended(m.handle(Poll(coder_slots=4))) == End("halted", "first")


def test_a_spent_budget_halts_when_a_story_would_launch() -> None:
    m = machine(CHAIN, concurrency=1)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("a", "done"))
    spent = "the epic budget of $1.00 is spent ($1.20)"
    assert m.handle(Poll(coder_slots=4, budget_spent=spent)) == [
        ReportBudget(),
        Say(f"epic ep: stopped launching stories — {spent}"),
        MarkWaiting("b", f"not started: {spent}"),
        MarkWaiting("c", f"not started: {spent}"),
        MarkWaiting("d", f"not started: {spent}"),
        End("halted", spent),
    ]


def test_a_spent_budget_with_nothing_to_launch_halts_nothing() -> None:
    m = machine(CHAIN, concurrency=4)
    m.handle(Poll(coder_slots=4))  # a and d run; b, c wait for a
    assert m.handle(Poll(coder_slots=4, budget_spent="spent")) == []
    assert m.halted is None


def test_a_spent_budget_with_no_free_slot_halts_nothing() -> None:
    m = machine(FLAT, concurrency=1)
    m.handle(Poll(coder_slots=4))
    assert m.handle(Poll(coder_slots=4, budget_spent="spent")) == []
    assert m.halted is None


def test_a_cancel_stops_every_running_story_and_ends_cancelled() -> None:
    m = machine(FLAT, concurrency=2)
    m.handle(Poll(coder_slots=4))
    assert m.handle(Cancelled()) == [StopAll()]
    assert m.handle(StoryStopped("x", "cancelled")) == [MarkWaiting("x", "cancelled; resumable")]
    # y finished on its own while being stopped: kept as it is, no waiting mark
    assert m.handle(StoryStopped("y", "done")) == [End("cancelled", "cancelled by a signal")]
    assert m.handle(Poll(coder_slots=4)) == []  # an ended run launches nothing more
    assert m.statuses == {"x": "cancelled", "y": "done"}


def test_a_cancel_from_a_broken_trace_ends_halted_with_its_reason() -> None:
    m = machine(FLAT, concurrency=1)
    m.handle(Poll(coder_slots=4))
    m.handle(Cancelled(broken="could not write the trace"))
    assert m.handle(StoryStopped("x", "cancelled"))[-1] == End("halted", "could not write the trace")


def test_a_pending_cancel_launches_nothing_and_settles_an_idle_run() -> None:
    m = machine(FLAT)
    assert m.handle(Poll(coder_slots=4, may_launch=False)) == [End("failed")]


def test_a_second_cancel_changes_nothing() -> None:
    m = machine(FLAT)
    m.handle(Poll(coder_slots=4))
    m.handle(Cancelled())
    assert m.handle(Cancelled(broken="late")) == []


def test_an_empty_epic_is_done_at_once() -> None:
    assert machine(StoryPlan(epic_id="ep", stories=[])).handle(Poll(coder_slots=1)) == [End("done")]


def test_stories_stopped_by_fail_fast_do_not_hold_their_dependents() -> None:
    # Stopped stories resume on the next run; their dependents simply never became ready.
    m = machine(plan(("a", []), ("b", []), ("c", ["b"])), concurrency=2, fail_fast=True)
    m.handle(Poll(coder_slots=4))
    m.handle(StoryFinished("a", "failed"))
    assert m.handle(StoryStopped("b", "cancelled")) == [MarkWaiting("b", "cancelled; resumable")]
    assert m.handle(Poll(coder_slots=4)) == [
        MarkWaiting("c", "not started: fail-fast after a"),
        End("failed", "story a failed (fail-fast)"),
    ]


def test_a_story_in_the_merge_train_frees_its_lane_and_takes_it_back_when_sent_back() -> None:
    m = machine(FLAT, concurrency=1)
    assert launched(m.handle(Poll(coder_slots=4))) == ["x"]
    assert launched(m.handle(Poll(coder_slots=4))) == []
    # x waits in the merge train: its lane launches y while x's task still runs.
    assert launched(m.handle(LaneFreed("x"), Poll(coder_slots=4))) == ["y"]
    assert m.running == ["x", "y"]
    # x is sent back to work: it holds a lane again, so nothing more launches when y merges.
    m.handle(LaneFreed("x", freed=False))
    m.handle(LaneFreed("y"))
    assert launched(m.handle(Poll(coder_slots=4))) == []
    m.handle(StoryFinished("y", "done"))
    assert launched(m.handle(Poll(coder_slots=4))) == []
    assert launched(m.handle(StoryFinished("x", "done"), Poll(coder_slots=4))) == ["z"]


def test_a_story_in_the_merge_train_is_still_stopped_by_a_cancel() -> None:
    m = machine(FLAT, concurrency=1)
    m.handle(Poll(coder_slots=4))
    m.handle(LaneFreed("x"), Poll(coder_slots=4))
    assert m.handle(Cancelled()) == [StopAll()]
    m.handle(StoryStopped("x", "cancelled"))
    assert ended(m.handle(StoryStopped("y", "cancelled"))) == End("cancelled", "cancelled by a signal")
    # A lane freed for a story no longer running changes nothing.
    m.handle(LaneFreed("x"))
    assert m.merging == set()


def made_ahead(instructions: list[Instruction]) -> list[str]:
    return [i.story for i in instructions if isinstance(i, MakeAhead)]


# base ← left, base ← right, left and right ← top; mid ← (left, other)
WIDE = plan(
    ("base", []),
    ("left", ["base"]),
    ("right", ["base"]),
    ("other", []),
    ("top", ["left", "right"]),
    ("mid", ["left", "other"]),
)


@pytest.mark.parametrize(
    ("p", "running", "freed", "done", "rank", "expected"),
    [
        (CHAIN, ["a"], ["a"], [], {}, ["b"]),  # b needs only a, now in the train
        (CHAIN, ["a", "d"], ["d"], [], {}, []),  # d has no dependents
        # Each story in the train makes its best-ranked dependent's lane ahead, once.
        (DIAMOND, ["base"], ["base"], [], {"left": 1.0, "right": 2.0}, ["right"]),
        (DIAMOND, ["base"], ["base"], [], {}, ["left"]),  # plan order breaks ties
        # top needs left and right: made ahead once both are in the train (or merged).
        (WIDE, ["left", "right"], ["left"], ["base"], {}, []),
        (WIDE, ["left", "right"], ["left", "right"], ["base"], {}, ["top"]),
        (WIDE, ["right"], ["right"], ["base", "left"], {}, ["top"]),
        # mid waits for `other`, still at work: not made ahead.
        (WIDE, ["left", "other"], ["left"], ["base"], {"mid": 5.0}, []),
    ],
)
def test_a_story_in_the_merge_train_makes_its_next_dependents_lane_ahead(
    p: StoryPlan,
    running: list[str],
    freed: list[str],
    done: list[str],
    rank: dict[str, float],
    expected: list[str],
) -> None:
    m = machine(p, concurrency=8, rank=rank)
    m.statuses.update({s: "done" for s in done})
    m.running += running
    out: list[Instruction] = []
    for story in freed:
        out += m.handle(LaneFreed(story))
    assert made_ahead(out) == expected


def test_a_lane_is_made_ahead_once_and_never_for_a_stopping_run() -> None:
    m = machine(CHAIN)
    assert launched(m.handle(Poll(coder_slots=4))) == ["a", "d"]
    assert made_ahead(m.handle(LaneFreed("a"))) == ["b"]
    # a red merge sends a back to work, and it enters the train again: b's lane is made already.
    m.handle(LaneFreed("a", freed=False))
    assert made_ahead(m.handle(LaneFreed("a"))) == []
    # b still launches only when a is done, as any story.
    assert launched(m.handle(Poll(coder_slots=4))) == []
    assert launched(m.handle(StoryFinished("a", "done"), Poll(coder_slots=4))) == ["b"]
    halted = machine(CHAIN)
    halted.handle(Poll(coder_slots=4), StoryFinished("d", "done", halt="budget"))
    assert made_ahead(halted.handle(LaneFreed("a"))) == []
    cancelled = machine(CHAIN)
    cancelled.handle(Poll(coder_slots=4), Cancelled())
    assert made_ahead(cancelled.handle(LaneFreed("a"))) == []


def test_a_story_whose_tasks_are_done_makes_its_dependents_lane_ahead_already() -> None:
    m = machine(WIDE, concurrency=8)
    assert launched(m.handle(Poll(coder_slots=8))) == ["base", "other"]
    assert made_ahead(m.handle(TasksDone("base"))) == ["left"]
    assert made_ahead(m.handle(LaneFreed("base"))) == ["right"]  # the next one, once
    m.handle(StoryFinished("base", "done"))
    assert launched(m.handle(Poll(coder_slots=8))) == ["left", "right"]
    # mid needs left and other: made ahead when the second of them is that far.
    assert made_ahead(m.handle(TasksDone("other"))) == []
    assert made_ahead(m.handle(TasksDone("left"))) == ["mid"]
    # A story not running tells nothing; a finished one is forgotten.
    assert made_ahead(m.handle(TasksDone("top"))) == []
    m.handle(StoryFinished("other", "done"))
    assert "other" not in m.tasks_done
