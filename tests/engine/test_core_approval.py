"""The approval rule (engine/core/approval.py), by tables: no git, no processes."""

from __future__ import annotations

import pytest

from flowd.engine.core.approval import (
    ApprovalRefused,
    Approve,
    Revise,
    approval_due,
    effect_name,
    is_approved,
    on_review_comment,
    question,
    read_approval,
)
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.pause import PAUSE_REASONS, parse_pause_on, question_for
from flowd.engine.core.stops import AwaitingApproval


@pytest.mark.parametrize(
    ("pause_on", "approved", "tasks", "due"),
    [
        ({"merge"}, None, 3, True),  # never approved: asks
        ({"merge"}, 3, 3, False),  # approved as it stands: merges without asking again
        ({"merge"}, 3, 4, True),  # a task came after the approval: asks again
        ({"merge"}, 2, 3, True),
        ({"budget", "blocked"}, None, 3, False),  # without `merge`: never asks
        (set(), 3, 4, False),
    ],
)
def test_when_a_finished_story_asks(pause_on: set[str], approved: int | None, tasks: int, due: bool) -> None:
    assert approval_due(pause_on, approved, tasks) is due


@pytest.mark.parametrize(("approved", "tasks", "covered"), [(None, 1, False), (2, 2, True), (2, 3, False)])
def test_an_approval_covers_the_plan_it_was_given_on(approved: int | None, tasks: int, covered: bool) -> None:
    assert is_approved(approved, tasks) is covered


@pytest.mark.parametrize(
    ("text", "effect"),
    [
        ("approve", Approve()),
        ("  Approve \n", Approve()),
        ("APPROVE", Approve()),
        ("shout it", Revise("shout it")),
        ("approve, but rename x first", Revise("approve, but rename x first")),
        ("stop", Revise("stop")),  # only `approve` merges; any other text is a change to make
        ("  use argon2  ", Revise("use argon2")),
    ],
)
def test_what_an_answer_means(text: str, effect: Approve | Revise) -> None:
    assert read_approval(text) == effect


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_an_empty_answer_decides_nothing(text: str) -> None:
    with pytest.raises(ApprovalRefused, match="takes `approve`"):
        read_approval(text)


def test_a_review_comment_sends_the_story_back_with_the_comment_as_its_task() -> None:
    assert on_review_comment() == Revise(None)


@pytest.mark.parametrize(
    ("effect", "name"), [(Approve(), "approve"), (Revise("x"), "revise"), (Revise(None), "revise")]
)
def test_the_recorded_effect(effect: Approve | Revise, name: str) -> None:
    assert effect_name(effect) == name


def test_merge_is_a_pause_reason_the_cli_accepts() -> None:
    assert "merge" in PAUSE_REASONS
    assert parse_pause_on("merge,budget") == ["merge", "budget"]


def test_the_question_offers_approve_and_names_the_story() -> None:
    asked, options = question("api", "ready to merge with 2 task(s) done")
    assert options == ["approve"] and asked.startswith("Story api is ready to merge with 2 task(s) done")
    via_pause = question_for("merge", "api", "ready to merge with 2 task(s) done")
    assert (via_pause.question, via_pause.options) == (asked, options)


def test_a_story_awaiting_approval_is_paused_for_merge() -> None:
    outcome = outcome_of(AwaitingApproval(2), StoryFacts("api", "story/ep/api", ["x"], frozenset({"merge"})))
    assert (outcome.status, outcome.pause, outcome.pause_run) == ("paused", "merge", False)
    assert outcome.reason == "ready to merge with 2 task(s) done" and outcome.branch == "story/ep/api"
