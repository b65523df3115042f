"""Pause and ask as tables: which answers each pause takes, what they do, and how the scheduler
waits on a person (docs/answers.md); no git, no agents, no loop."""

from __future__ import annotations

import pytest

from flowd.engine.core.pause import (
    AnswerRefused,
    Decision,
    PauseReason,
    Raise,
    Stop,
    Tell,
    Wait,
    parse_pause_on,
    question_for,
    read_answer,
)
from flowd.engine.core.scheduler import (
    Answered,
    AskPerson,
    Cancelled,
    End,
    Instruction,
    Launch,
    MarkWaiting,
    Paused,
    Poll,
    ReportBudget,
    Scheduler,
    StoryFinished,
)
from flowd.plan.model import Story, StoryPlan


@pytest.mark.parametrize(
    ("reason", "text", "decision"),
    [
        ("budget", "raise 5", Raise(5.0)),
        ("budget", "  RAISE $2.5 ", Raise(2.5)),
        ("budget", "stop", Stop()),
        ("blocked", "the schema is in docs/schema.sql", Tell("the schema is in docs/schema.sql")),
        ("blocked", "Stop", Stop()),
        ("noExecutor", "wait", Wait()),
        ("noExecutor", "stop", Stop()),
    ],
)
def test_each_pause_reads_its_answers(reason: PauseReason, text: str, decision: Decision) -> None:
    assert read_answer(reason, text) == decision


@pytest.mark.parametrize(
    ("reason", "text", "says"),
    [
        ("budget", "raise abc", "positive number of USD"),
        ("budget", "raise -1", "positive number of USD"),
        ("budget", "raise inf", "positive number of USD"),
        ("budget", "more please", "`raise N`"),
        ("blocked", "   ", "empty"),
        ("noExecutor", "later", "`wait` or `stop`"),
    ],
)
def test_an_answer_that_does_not_fit_is_one_sentence(reason: PauseReason, text: str, says: str) -> None:
    with pytest.raises(AnswerRefused) as refused:
        read_answer(reason, text)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_pause_on_is_read_from_a_comma_list() -> None:
    assert parse_pause_on("budget, blocked,budget") == ["budget", "blocked"]
    assert parse_pause_on("") == []
    with pytest.raises(AnswerRefused, match="--pause-on: 'money' is not one of budget, blocked, noExecutor"):
        parse_pause_on("money")


@pytest.mark.parametrize(
    ("reason", "options"),
    [("budget", ["raise 5", "stop"]), ("blocked", ["stop"]), ("noExecutor", ["wait", "stop"])],
)
def test_each_question_offers_its_answers(reason: PauseReason, options: list[str]) -> None:
    asked = question_for(reason, "api", "the detail")
    assert asked.options == options
    assert asked.question


# -- the scheduler waiting on a person ------------------------------------------------------------


def plan(*stories: tuple[str, list[str]]) -> StoryPlan:
    return StoryPlan(
        epic_id="ep", stories=[Story(id=s, title=s, owned=[f"{s}.txt"], depends_on=d) for s, d in stories]
    )


# a ← b, and c alone
PLAN = plan(("a", []), ("b", ["a"]), ("c", []))


def machine(pause_on: frozenset[str] = frozenset({"budget", "blocked", "noExecutor"})) -> Scheduler:
    return Scheduler(PLAN, {}, 4, False, pause_on=pause_on)


def kinds(out: list[Instruction]) -> list[str]:
    return [type(i).__name__ for i in out]


def test_a_paused_story_frees_its_slot_and_the_others_go_on() -> None:
    m = machine()
    assert [i.story for i in m.handle(Poll(4)) if isinstance(i, Launch)] == ["a", "c"]
    out = m.handle(Paused("blocked", story="a", stopped="a", detail="blocked on x"))
    assert out == [AskPerson("a", "blocked", "blocked on x")]
    assert m.running == ["c"] and m.paused == {"a": "blocked"}
    # c finishes: only the paused story (and its dependent) are left, and the run stays alive.
    out = m.handle(StoryFinished("c", "done"), Poll(4))
    assert not any(isinstance(i, End | Launch | MarkWaiting) for i in out)
    assert m.ended is None


def test_an_answer_that_goes_on_launches_the_story_again() -> None:
    m = machine()
    m.handle(Poll(4), Paused("blocked", story="a", stopped="a"), StoryFinished("c", "done"))
    out = m.handle(Answered("a", go_on=True), Poll(4))
    assert [i.story for i in out if isinstance(i, Launch)] == ["a"]
    out = m.handle(StoryFinished("a", "done"), Poll(4))
    assert [i.story for i in out if isinstance(i, Launch)] == ["b"]
    out = m.handle(StoryFinished("b", "done"), Poll(4))
    assert out[-1] == End("done")


@pytest.mark.parametrize(
    ("reason", "outcome"), [("blocked", "failed"), ("noExecutor", "halted"), ("budget", "halted")]
)
def test_stop_does_what_the_run_did_without_pause_on(reason: str, outcome: str) -> None:
    m = machine()
    m.handle(Poll(4), Paused(reason, story="a", stopped="a"), StoryFinished("c", "done"))
    out = m.handle(Answered("a", go_on=False), Poll(4))
    assert MarkWaiting("a", f"stopped by an answer to its {reason} pause") in out
    assert MarkWaiting("b", "waiting for a") in out
    end = out[-1]
    assert isinstance(end, End) and end.outcome == outcome


def test_the_epic_budget_pauses_the_run_once_and_raise_goes_on() -> None:
    m = machine()
    out = m.handle(Poll(4, budget_spent="the epic budget of $1.00 is spent ($1.20)"))
    assert out == [ReportBudget(), AskPerson(None, "budget", "the epic budget of $1.00 is spent ($1.20)")]
    assert m.run_paused == "budget" and m.ended is None
    # Asked once; nothing launches while the run waits.
    assert m.handle(Poll(4, budget_spent="again")) == []
    out = m.handle(Answered(None, go_on=True), Poll(4))
    assert [i.story for i in out if isinstance(i, Launch)] == ["a", "c"]


def test_a_story_stopped_by_the_epic_budget_waits_with_the_run() -> None:
    m = machine()
    m.handle(Poll(4))
    out = m.handle(Paused("budget", story=None, stopped="a", detail="spent"))
    assert out == [AskPerson(None, "budget", "spent")]
    # A second story reaching the budget is not asked about again.
    assert m.handle(Paused("budget", story=None, stopped="c")) == []
    assert m.running == [] and m.ended is None
    out = m.handle(Answered(None, go_on=False), Poll(4))
    end = out[-1]
    assert isinstance(end, End) and end.outcome == "halted"
    assert {i.story for i in out if isinstance(i, MarkWaiting)} == {"a", "b", "c"}


def test_without_pause_on_the_budget_halts_as_before() -> None:
    m = machine(frozenset())
    out = m.handle(Poll(4, budget_spent="spent"))
    assert kinds(out) == ["ReportBudget", "Say", "MarkWaiting", "MarkWaiting", "MarkWaiting", "End"]


def test_a_pause_left_in_the_trace_is_restored_without_asking_again() -> None:
    m = machine()
    assert m.handle(Paused("blocked", story="a", told=True)) == []
    out = m.handle(Poll(4))
    assert [i.story for i in out if isinstance(i, Launch)] == ["c"]


def test_a_halt_ends_the_run_with_pauses_unanswered() -> None:
    m = machine()
    m.handle(Poll(4), Paused("blocked", story="a", stopped="a"))
    out = m.handle(StoryFinished("c", "waiting", halt="disk full"), Poll(4))
    end = out[-1]
    assert isinstance(end, End) and end.outcome == "halted"
    assert m.paused == {"a": "blocked"}  # still paused: a resumed run asks again
    assert not any(isinstance(i, MarkWaiting) and i.story == "a" for i in out)


def test_a_cancel_of_a_run_with_only_pauses_ends_it() -> None:
    m = machine()
    m.handle(Poll(4), Paused("blocked", story="a", stopped="a"), StoryFinished("c", "done"))
    assert m.handle(Cancelled())[-1] == End("cancelled", "cancelled by a signal")


def test_plain_progress_says_what_a_pause_asks_and_how_to_answer_it() -> None:
    from flowd.control.progress import plain_lines
    from flowd.events.model import Envelope, RunStarted, StoryAnswered, StoryPaused
    from flowd.trace.view import RunView

    view = RunView(run_id="r1")
    lines: list[str] = []
    for seq, event in enumerate(
        [
            RunStarted(epic_id="ep", epic_branch="epic/ep", plan="p", stories=["a"], concurrency=1),
            StoryPaused(lane="a", reason="blocked", question="Story a is blocked on x.", options=["stop"]),
            StoryAnswered(lane="a", answer="use y", by="cli"),
        ],
        1,
    ):
        envelope = Envelope(seq=seq, at="2026-11-30T10:00:00.000Z", run_id="r1", event=event)
        view.apply(envelope)
        lines += [line.split(" ", 1)[1] for line in plain_lines(view, envelope)]
    assert lines[-2:] == [
        "a: paused (blocked): Story a is blocked on x. — answer: flowd answer r1 --story a <text | stop>",
        "a: answered (cli): use y",
    ]


def test_the_fold_keeps_open_pauses_and_what_raise_added() -> None:
    from flowd.events.model import Envelope, RunStarted, StoryAnswered, StoryPaused
    from flowd.trace.view import RunView

    view = RunView(run_id="r1")
    events = [
        RunStarted(
            epic_id="ep", epic_branch="epic/ep", plan="p", stories=["a"], concurrency=1, budget_usd=1.0
        ),
        StoryPaused(reason="budget", question="raise?", options=["raise 5", "stop"]),
        StoryPaused(lane="a", reason="blocked", question="what?", options=["stop"]),
        StoryAnswered(answer="raise 2.5", by="editor"),
    ]
    for seq, event in enumerate(events, 1):
        view.apply(Envelope(seq=seq, at="2026-11-30T10:00:00.000Z", run_id="r1", event=event))
    assert list(view.pauses) == ["a"] and view.raised_usd == 2.5 and view.budget_usd == 3.5
    assert view.shown_status == "paused"  # alive, nothing running, a story waits
