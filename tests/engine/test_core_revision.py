"""Revision tasks and merge revisions as tables: numbering, rounds counted from the checkpoint,
revise or give up, and where a resumed story stands."""

from __future__ import annotations

import pytest

from flowd.engine.core.revision import (
    MERGE_SUBJECT,
    REVIEW_COMMENT,
    REVISION,
    Cleared,
    Revise,
    RevisionsSpent,
    after_judge,
    after_red_merge,
    merge_rounds_done,
    resuming_round,
    rounds_not_counted,
    task_number,
    with_revision,
    with_task,
)
from flowd.tasks.model import Task, TaskPlan

MERGE = f": {MERGE_SUBJECT}"
JUDGE = ": close the judge's findings"


def plan(*titles: str, done: int = 0) -> TaskPlan:
    """Tasks titled `titles`, the first `done` of them completed."""
    return TaskPlan(story_id="s", tasks=[Task(title=t, completed=i < done) for i, t in enumerate(titles)])


@pytest.mark.parametrize(
    ("titles", "expected"),
    [
        ((), 1),
        (("Add login",), 1),
        (("Add login", f"Revision 1{JUDGE}"), 2),
        (("Add login", f"Revision 1{JUDGE}", f"Revision 2{MERGE}"), 3),
        (("Revision 4: from the editor",), 5),  # numbers keep rising even with gaps
        (("Revisions are hard",), 1),  # not a revision title
    ],
)
def test_revision_number(titles: tuple[str, ...], expected: int) -> None:
    assert task_number(plan(*titles), REVISION) == expected


@pytest.mark.parametrize(
    ("titles", "kind", "expected"),
    [
        ((), REVIEW_COMMENT, 1),
        (("Revision 1: x", "Revision 2: y"), REVIEW_COMMENT, 1),  # each kind counts on its own
        (("Review comment 1: a.py:3", "Revision 1: x"), REVIEW_COMMENT, 2),
        (("Review comment 1: a.py:3", "Revision 1: x"), REVISION, 2),
        (("Review comment 3: a.py:3",), REVIEW_COMMENT, 4),
        (("Review comments 1: a.py",), REVIEW_COMMENT, 1),  # not that kind's title
    ],
)
def test_task_number_counts_each_kind_apart(titles: tuple[str, ...], kind: str, expected: int) -> None:
    assert task_number(plan(*titles), kind) == expected
    appended = with_task(plan(*titles), kind, "subject", "body")
    assert appended.tasks[-1].title == f"{kind} {expected}: subject"
    assert not appended.tasks[-1].completed


def test_with_revision_appends_an_unchecked_task_and_keeps_the_rest() -> None:
    before = plan("Add login", f"Revision 1{JUDGE}", done=2)
    after = with_revision(before, MERGE_SUBJECT, "fix the combination")
    assert after.tasks[:2] == before.tasks
    assert after.tasks[2] == Task(title=f"Revision 2{MERGE}", description="fix the combination")
    assert after.next_incomplete() == (3, after.tasks[2])


@pytest.mark.parametrize(
    ("titles", "done", "rounds", "resuming"),
    [
        (("Add login",), 1, 0, None),
        (("Add login", f"Revision 1{JUDGE}"), 1, 0, None),  # a judge revision is not a merge round
        (("Add login", f"Revision 1{MERGE}"), 1, 1, 1),  # killed during merge revision 1
        (("Add login", f"Revision 1{MERGE}"), 2, 1, None),  # revision 1 done, not merged yet
        (("Add login", f"Revision 1{MERGE}", f"Revision 2{JUDGE}", f"Revision 3{MERGE}"), 3, 2, 2),
        (("Add login", f"Revision 1{MERGE}", f"Revision 2{JUDGE}"), 2, 1, None),  # in a judge revision
    ],
)
def test_rounds_and_resume_come_from_the_checkpoint(
    titles: tuple[str, ...], done: int, rounds: int, resuming: int | None
) -> None:
    p = plan(*titles, done=done)
    assert merge_rounds_done(p) == rounds
    assert resuming_round(p) == resuming


@pytest.mark.parametrize(
    ("titles", "resumed_from", "expected"),
    [
        ((f"Revision 1{MERGE}",), None, 0),  # a new story
        ((f"Revision 1{MERGE}",), "started", 0),  # killed or cancelled: goes on, every round counts
        ((f"Revision 1{MERGE}", f"Revision 2{JUDGE}", f"Revision 3{MERGE}"), "failed", 2),  # a fresh try
        (("Add login",), "failed", 0),
    ],
)
def test_a_failed_story_run_again_gets_a_fresh_allowance(
    titles: tuple[str, ...], resumed_from: str | None, expected: int
) -> None:
    assert rounds_not_counted(plan(*titles, done=len(titles)), resumed_from) == expected


@pytest.mark.parametrize(
    ("done", "limit", "expected"),
    [
        (0, 1, Revise(1)),
        (0, 3, Revise(1)),
        (2, 3, Revise(3)),
        (0, 0, RevisionsSpent("epic gates failed after merging; merge undone:\nboom")),  # as before revisions
        (
            1,
            1,
            RevisionsSpent("epic gates failed after merging (after 1 merge revision); merge undone:\nboom"),
        ),
        (
            2,
            2,
            RevisionsSpent("epic gates failed after merging (after 2 merge revisions); merge undone:\nboom"),
        ),
        (
            3,
            1,
            RevisionsSpent("epic gates failed after merging (after 3 merge revisions); merge undone:\nboom"),
        ),
    ],
)
def test_after_red_merge(done: int, limit: int, expected: Revise | RevisionsSpent) -> None:
    assert after_red_merge(done, limit, "boom") == expected


@pytest.mark.parametrize(
    ("round_", "rounds", "clean", "empty", "expected"),
    [
        (1, 2, True, False, Cleared("judge cleared (round 1)")),
        (2, 2, True, True, Cleared("verified already in place (round 2)")),
        (1, 2, False, False, Revise(1)),  # one more revision task, then judged again
        (1, 3, False, True, Revise(1)),
        (2, 2, False, False, RevisionsSpent("judge not cleared after 1 revision:\n- x")),
        (3, 3, False, False, RevisionsSpent("judge not cleared after 2 revisions:\n- x")),
        (
            1,
            1,
            False,
            True,
            RevisionsSpent(
                "the story's code is not in place after 0 revisions, and its branch has no changes:\n- x"
            ),
        ),
    ],
)
def test_after_judge(
    round_: int, rounds: int, clean: bool, empty: bool, expected: Cleared | Revise | RevisionsSpent
) -> None:
    assert after_judge(round_, rounds, clean=clean, empty=empty, issues="- x") == expected
