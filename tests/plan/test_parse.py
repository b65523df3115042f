from __future__ import annotations

from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.plan.parse import PlanInvalid, check_plan_file, load_plan, parse_plan_text
from flowd.plan.violation import Violation

JSON_PLAN = """{
  "epicId": "auth",
  "epic": "Add password login",
  "stories": [
    {"id": "api", "title": "Login API", "owned": ["src/api/"],
     "dependsOn": []},
    {
      "id": "ui",
      "title": "Login UI",
      "owned": ["src/ui", "src/api/x"],
      "dependsOn": ["api", "ghost"]
    }
  ]
}
"""


def at(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """0-based line and column of the nth occurrence of `needle`."""
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def where(v: Violation) -> tuple[int | None, int | None]:
    return v.line, v.column


def check(text: str, *, markdown: bool) -> list[Violation]:
    from flowd.plan.parse import check_text

    return check_text(text, markdown=markdown)[1]


def test_json_plan_decodes_with_positions() -> None:
    parsed = parse_plan_text(JSON_PLAN, markdown=False)
    assert parsed.plan is not None and parsed.violations == []
    assert parsed.plan.ids == ["api", "ui"]
    assert parsed.plan.stories[0].owned == ["src/api/"]
    span = parsed.positions.values[("stories", 1, "dependsOn", 1)]
    assert (span.line, span.column) == at(JSON_PLAN, '"ghost"')
    assert span.end_column - span.column == len('"ghost"')
    key = parsed.positions.keys[("stories", 1, "owned")]
    assert (key.line, key.column) == at(JSON_PLAN, '"owned"', 1)


def test_violations_point_at_the_offending_item() -> None:
    found = check(JSON_PLAN, markdown=False)
    # In line order: the overlap (line 20) before the unknown dependency (line 21).
    assert [v.code for v in found] == ["plan.overlap", "plan.unknownDependency"]
    assert where(found[0]) == at(JSON_PLAN, '"src/api/x"')
    assert where(found[1]) == at(JSON_PLAN, '"ghost"')


def test_a_story_level_violation_points_at_the_story_id() -> None:
    text = '{"epicId": "e", "stories": [\n  {"title": "t", "id": "Bad_Id", "owned": ["a"]}]}'
    found = check(text, markdown=False)
    assert [v.code for v in found] == ["plan.badId"]
    assert where(found[0]) == at(text, '"Bad_Id"')


def test_owns_nothing_points_at_the_field_or_the_story() -> None:
    text = (
        '{"epicId": "e", "stories": [\n {"id": "a", "title": "t", "owned": []},\n {"id": "b", "title": "t"}]}'
    )
    found = check(text, markdown=False)
    assert [where(v) for v in found] == [at(text, '"owned"'), at(text, '"id"', 1)]


def markdown_plan(block: str, newline: str = "\n") -> str:
    lines = [
        "# Epic: auth",
        "",
        "Add password login.",
        "",
        "## Plan block",
        "",
        "Edit this block to change the plan; the prose above is regenerated from it.",
        "",
        "```json storyplan",
        *block.splitlines(),
        "```",
        "",
    ]
    return newline.join(lines)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_markdown_positions_are_offset_by_the_block(newline: str) -> None:
    text = markdown_plan(JSON_PLAN, newline)
    found = check(text, markdown=True)
    assert [v.code for v in found] == ["plan.overlap", "plan.unknownDependency"]
    assert where(found[1]) == at(text, '"ghost"')
    assert found[1].line == 9 + at(JSON_PLAN, '"ghost"')[0]


def test_markdown_takes_the_first_storyplan_block_only() -> None:
    text = markdown_plan(JSON_PLAN) + "\n```json storyplan\n{}\n```\n"
    parsed = parse_plan_text(text, markdown=True)
    assert parsed.plan is not None and parsed.plan.epic_id == "auth"


def test_markdown_without_a_block() -> None:
    found = check("# Epic\n\n```json\n{}\n```\n", markdown=True)
    assert [v.code for v in found] == ["plan.noBlock"]
    assert "no ```json storyplan fenced block" in found[0].message


def test_bad_json_reports_line_and_column() -> None:
    text = '{\n  "epicId": "e",\n  "stories": [\n    {"id": "a",, "title": "t"}\n  ]\n}\n'
    found = check(text, markdown=False)
    assert [v.code for v in found] == ["plan.parse"]
    assert where(found[0]) == at(text, ", ")
    assert "line 4, column 16" in found[0].message


def test_bad_json_inside_markdown_reports_file_coordinates() -> None:
    text = markdown_plan('{\n  "epicId": "e"\n  "stories": []\n}')
    found = check(text, markdown=True)
    assert [v.code for v in found] == ["plan.parse"]
    assert found[0].line == 11 and found[0].column == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "the plan must be a JSON object with epicId, epic and stories"),
        ('{"epic": "x", "stories": []}', "epicId: is required"),
        (
            '{"epicId": "e", "stories": [{"id": "a", "title": "t", "owned": "src"}]}',
            "stories[0].owned: Input should be a valid list",
        ),
        ('{"epicId": "e", "stories": [{"id": "a", "owned": ["x"]}]}', "stories[0].title: is required"),
        (
            '{"epicId": "e", "stories": [{"id": "a", "title": "t", "owned": ["x", 3]}]}',
            "stories[0].owned[1]: Input should be a valid string",
        ),
    ],
)
def test_wrong_shapes_are_violations_with_paths(text: str, message: str) -> None:
    found = check(text, markdown=False)
    assert found and found[0].code in ("plan.shape",)
    assert found[0].message == message
    assert found[0].line == 0


def test_shape_error_points_at_the_wrong_value() -> None:
    text = '{"epicId": "e", "stories": [\n  {"id": "a", "title": "t", "owned": "src"}]}'
    found = check(text, markdown=False)
    assert where(found[0]) == at(text, '"src"')
    assert found[0].story == "a" and found[0].field == "owned"


def test_load_plan_returns_a_valid_plan(tmp_path: Path) -> None:
    path = tmp_path / "auth.epic.json"
    path.write_text(JSON_PLAN.replace(', "ghost"', "").replace('"src/api/x"', '"src/web"'))
    plan = load_plan(path)
    assert plan.epic_branch == "epic/auth"
    assert plan.story("ui") is not None and plan.story("nope") is None


def test_load_plan_raises_with_every_problem_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plan.md"
    path.write_text(markdown_plan(JSON_PLAN))
    with pytest.raises(PlanInvalid) as info:
        load_plan(path, shown="plan.md")
    # The same lines `flowd plan validate` prints: PLAN:LINE:COL, in line order, then the verdict.
    assert str(info.value).splitlines() == [
        "plan.md:19:27: stories 'api' and 'ui' both own 'src/api' / 'src/api/x'",
        "plan.md:20:28: story 'ui' depends on unknown story 'ghost'",
        "plan.md: invalid, 2 violations",
    ]
    assert info.value.exit_code == 2


def test_unreadable_plan_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such plan file"):
        load_plan(tmp_path / "missing.json")
    found = check_plan_file(tmp_path / "missing.json")
    assert [v.code for v in found] == ["plan.unreadable"]
    assert check_plan_file(tmp_path)[0].message.endswith("is a directory, not a plan file")


def test_a_markdown_plan_without_md_suffix_is_recognised(tmp_path: Path) -> None:
    path = tmp_path / "plan.txt"
    path.write_text(markdown_plan(JSON_PLAN))
    assert [v.code for v in check_plan_file(path)] == ["plan.overlap", "plan.unknownDependency"]


def test_a_byte_order_mark_is_skipped() -> None:
    parsed = parse_plan_text("\ufeff" + JSON_PLAN, markdown=False)
    assert parsed.plan is not None and parsed.plan.epic_id == "auth"
