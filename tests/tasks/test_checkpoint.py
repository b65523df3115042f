from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowd.tasks.checkpoint import CheckpointError, parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task, TaskPlan, next_incomplete

SAMPLE = TaskPlan(
    story_id="api",
    tasks=[
        Task(title="Add the route", description="POST /login.\nSatisfies: 1", completed=True),
        Task(title="Add tests", description="Cover errors.\nDepends on: 1\nOwns: tests/api/"),
        Task(title="Wire it", description=""),
    ],
    brief="Keep handlers thin.",
)

RENDERED = """# Plan: api

## [x] Add the route
POST /login.
Satisfies: 1

## [ ] Add tests
Cover errors.
Depends on: 1
Owns: tests/api/

## [ ] Wire it

# Brief

Keep handlers thin.
"""


def test_render_matches_the_layout() -> None:
    assert render_checkpoint(SAMPLE) == RENDERED


def test_parse_reads_the_layout_back() -> None:
    assert parse_checkpoint(RENDERED) == SAMPLE


def test_parse_tolerates_crlf_uppercase_x_and_no_brief() -> None:
    text = "# Plan: s\r\n\r\n## [X] One\r\nfirst\r\n\r\n## [ ] Two\r\n"
    plan = parse_checkpoint(text)
    assert plan.story_id == "s" and plan.brief is None
    assert [(t.title, t.description, t.completed) for t in plan.tasks] == [
        ("One", "first", True),
        ("Two", "", False),
    ]


def test_a_description_line_starting_with_hashes_survives_a_round_trip() -> None:
    plan = TaskPlan(
        story_id="s",
        tasks=[Task(title="t", description="intro\n## Notes\n  # Brief\n\\## already escaped\n#tag")],
        brief="## not a task\n# Brief",
    )
    text = render_checkpoint(plan)
    assert "\n\\## Notes\n" in text
    assert parse_checkpoint(text) == plan


def test_a_hand_written_hash_line_in_a_description_is_reported() -> None:
    # The original splits at every line starting with `## `; such a line is a malformed header.
    text = "# Plan: s\n\n## [ ] t\nintro\n## Notes\nmore\n"
    with pytest.raises(CheckpointError, match=r"malformed task header on line 5: '## Notes'"):
        parse_checkpoint(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a '# Plan: <storyId>' header"),
        ("## [ ] t\n", "expected a '# Plan: <storyId>' header"),
        ("# Plan: s\n\n## [?] t\n", "malformed task header"),
        ("# Plan: s\n\n## []t\n", "malformed task header"),
        ("# Plan: s\nstray text\n## [ ] t\n", "text before the first"),
    ],
)
def test_parse_errors_are_clear(text: str, message: str) -> None:
    with pytest.raises(CheckpointError, match=message) as info:
        parse_checkpoint(text, source="stories/s.plan.md")
    assert str(info.value).startswith("stories/s.plan.md: ")
    assert info.value.exit_code == 2


def test_next_incomplete_and_completing() -> None:
    assert next_incomplete(SAMPLE) == (2, SAMPLE.tasks[1])
    after = SAMPLE.completing(2).completing(3)
    assert next_incomplete(after) is None and after.done


def test_prompt_for_puts_the_brief_first() -> None:
    assert SAMPLE.prompt_for(SAMPLE.tasks[2]) == "Keep handlers thin.\n\n---\n\n"
    assert (
        SAMPLE.model_copy(update={"brief": None}).prompt_for(SAMPLE.tasks[0]) == SAMPLE.tasks[0].description
    )


line = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]), max_size=20)
titles = line.map(lambda s: " ".join(s.split())).filter(bool)
descriptions = st.lists(
    st.one_of(line, st.sampled_from(["## x", "# Brief", "\\#", "  ## [ ] y"])), max_size=5
).map(lambda ls: "\n".join(ls).strip())


@given(
    st.lists(st.builds(Task, title=titles, description=descriptions, completed=st.booleans()), max_size=5),
    st.one_of(st.none(), descriptions.filter(bool)),
)
def test_round_trip(tasks: list[Task], brief: str | None) -> None:
    plan = TaskPlan(story_id="story-1", tasks=tasks, brief=brief)
    assert parse_checkpoint(render_checkpoint(plan)) == plan
