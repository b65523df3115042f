from __future__ import annotations

import pytest

from flowd.engine.replies import ReplyParseError, coder_sentinel, extract_json, parse_task_plan, parse_verdict

PLAN = '{"epicId": "whatever", "tasks": [{"title": "Add route", "description": "Do it.\\nSatisfies: 1", "completed": true}]}'


@pytest.mark.parametrize(
    "text",
    [
        PLAN,
        f"  {PLAN}\n",
        f"```json\n{PLAN}\n```",
        f"Here is the plan:\n\n```json\n{PLAN}\n```\n\nLet me know.",
        f"Sure! {PLAN} Hope that helps.",
        f"```\n{PLAN}\n```",
        f"Thinking {{not json}} ... then:\n```JSON\n{PLAN}\n```",
    ],
)
def test_extract_json_tolerates_fences_and_prose(text: str) -> None:
    assert extract_json(text)["tasks"][0]["title"] == "Add route"


def test_task_plan_ignores_epic_id_and_completed() -> None:
    plan = parse_task_plan(PLAN, "api")
    assert plan.story_id == "api"
    assert [(t.title, t.description, t.completed) for t in plan.tasks] == [
        ("Add route", "Do it.\nSatisfies: 1", False)
    ]


def test_task_plan_accepts_a_bare_list() -> None:
    assert parse_task_plan('[{"title": "x"}]', "s").tasks[0].description == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "your reply was empty"),
        ("I will do it later.", "your reply holds no valid JSON"),
        ('{"steps": []}', 'your reply has no "tasks" list'),
        ('{"tasks": []}', 'your reply\'s "tasks" list is empty'),
        ('{"tasks": ["a"]}', "your reply's tasks[0] is not an object"),
        ('{"tasks": [{"description": "d"}]}', "your reply is missing tasks[0].title"),
        ('{"tasks": [{"title": 3}]}', "your reply's tasks[0].title is not a string"),
        ('{"tasks": [{"title": "  "}]}', "your reply's tasks[0].title is empty"),
    ],
)
def test_task_plan_errors_speak_to_the_agent(text: str, message: str) -> None:
    with pytest.raises(ReplyParseError) as info:
        parse_task_plan(text, "s")
    assert info.value.message.startswith(message)


def test_verdict_clean_and_blocking() -> None:
    clean = parse_verdict(
        '{"issues": [{"severity": "minor", "title": "nit", "description": "d"}], "summary": "ok"}'
    )
    assert clean.clean and clean.summary == "ok" and len(clean.issues) == 1
    dirty = parse_verdict(
        '```json\n{"issues": [{"severity": "Major", "title": "bug", "description": "breaks"}, '
        '{"severity": "low", "title": "style"}]}\n```'
    )
    assert not dirty.clean
    assert [i.severity for i in dirty.issues] == ["major", "minor"]
    assert [i.title for i in dirty.blocking] == ["bug"]
    assert parse_verdict('{"issues": [], "summary": "fine"}').clean
    assert parse_verdict('{"summary": "no issues key"}').clean


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"issues": {"a": 1}}', 'your reply\'s "issues" is not a list'),
        ('{"issues": [{"title": "x"}]}', "your reply is missing issues[0].severity"),
        (
            '{"issues": [{"severity": "urgent", "title": "x"}]}',
            "your reply's issues[0].severity 'urgent' is not one of",
        ),
        (
            '{"issues": [{"severity": "major"}]}',
            "your reply's issues[0] has neither a title nor a description",
        ),
        ('"just a string"', "your reply is not a JSON object"),
    ],
)
def test_verdict_errors(text: str, message: str) -> None:
    with pytest.raises(ReplyParseError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_verdict(text)


@pytest.mark.parametrize(
    ("text", "blocked_on", "satisfied"),
    [
        ("Done.\n", None, False),
        ("", None, False),
        ("Tried.\nBLOCKED_ON: the users table from story db\n\n", "the users table from story db", False),
        ("Tried.\n`BLOCKED_ON: auth service`", "auth service", False),
        ("BLOCKED_ON:", "an unnamed dependency", False),
        ("Nothing to do.\nTASK_ALREADY_SATISFIED", None, True),
        ("**TASK_ALREADY_SATISFIED**.", None, True),
        ("BLOCKED_ON: x\nbut then I fixed it", None, False),
        ("I saw TASK_ALREADY_SATISFIED mentioned", None, False),
    ],
)
def test_coder_sentinel_reads_the_last_line(text: str, blocked_on: str | None, satisfied: bool) -> None:
    sentinel = coder_sentinel(text)
    assert sentinel.blocked_on == blocked_on and sentinel.already_satisfied is satisfied
