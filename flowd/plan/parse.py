"""Reading a story plan file: JSON, or Markdown with one ```` ```json storyplan ```` block.

Parsing keeps where every story and field sits in the file, so the language server and
`flowd plan validate` point at the offending line. Parsing does not validate: "unparseable" and
"invalid" stay distinguishable, yet `load_plan` and `check_plan_file` report both kinds together.

A plan with shape errors (`"title": 3`) is still checked against every other rule: the broken
fields are set aside (`_salvage`) and the rest validated, so one typo never hides the others.
Violations come in line order, and every command prints them alike (`describe`, docs/plan-format.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flowd.base.errors import InputError
from flowd.base.wire import validation_problems
from flowd.plan.jsonpos import LineIndex, Positions, scan_positions
from flowd.plan.model import StoryPlan
from flowd.plan.validate import violations
from flowd.plan.violation import Violation

# The first fence opening with `json`, blanks, `storyplan`; lazily up to a closing fence line.
_BLOCK = re.compile(r"```json[ \t]+storyplan[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL)
_BLOCK_EMPTY = re.compile(r"```json[ \t]+storyplan[ \t]*\r?\n[ \t]*```")
MARKDOWN_SUFFIXES = (".md", ".markdown")


@dataclass
class ParsedPlan:
    """A decoded plan (None when it did not decode), where things are, and what went wrong."""

    plan: StoryPlan | None
    positions: Positions = field(default_factory=Positions)
    violations: list[Violation] = field(default_factory=list)
    # When shapes were wrong: the plan without its broken fields, and those fields (story id or
    # None for the top level, wire field name or None for the whole story).
    salvaged: StoryPlan | None = None
    broken: set[tuple[str | None, str | None]] = field(default_factory=set)


def _shape_violations(exc: ValidationError, data: Any, positions: Positions) -> list[Violation]:
    """Each shape error in the one wording (`flowd.base.wire`), placed where its location sits in the file."""
    found = []
    for problem in validation_problems(exc):
        loc = problem.loc
        story: str | None = None
        field_name: str | None = None
        if len(loc) >= 2 and loc[0] == "stories" and isinstance(loc[1], int):
            stories = data.get("stories") if isinstance(data, dict) else None
            if isinstance(stories, list) and loc[1] < len(stories) and isinstance(stories[loc[1]], dict):
                raw_id = stories[loc[1]].get("id")
                story = raw_id if isinstance(raw_id, str) else None
            if len(loc) >= 3 and isinstance(loc[2], str):
                field_name = loc[2]
        violation = Violation(code="plan.shape", message=str(problem), story=story, field=field_name)
        found.append(violation.at(positions.find(loc)))
    return found


def _decode(text: str, start: int, end: int, index: LineIndex, what: str) -> ParsedPlan:
    """Decode the JSON in `text[start:end]`; positions and errors in whole-file coordinates."""
    source = text[start:end]
    try:
        data = json.loads(source)
    except json.JSONDecodeError as exc:
        line, column = index.position(start + exc.pos)
        message = f"{what} is not valid JSON: {exc.msg} (line {line + 1}, column {column + 1})"
        v = Violation(
            code="plan.parse", message=message, line=line, column=column, end_line=line, end_column=column + 1
        )
        return ParsedPlan(None, Positions(), [v])
    positions = scan_positions(text, start, end, index)
    if not isinstance(data, dict):
        message = f"{what} must be a JSON object with epicId, epic and stories"
        return ParsedPlan(
            None, positions, [Violation(code="plan.shape", message=message).at(positions.values.get(()))]
        )
    try:
        plan = StoryPlan.model_validate(data)
    except ValidationError as exc:
        parsed = ParsedPlan(None, positions, _shape_violations(exc, data, positions))
        salvage = _salvage(data, exc)
        if salvage is not None:
            parsed.salvaged, parsed.broken = salvage
        return parsed
    return ParsedPlan(plan, positions, [])


_PLACEHOLDER = "\0"  # the id given to a story whose own id is broken: never a real id


def _salvage(
    data: dict[str, Any], exc: ValidationError
) -> tuple[StoryPlan, set[tuple[str | None, str | None]]] | None:
    """The plan with every field pydantic refused reset to its default, and which were reset.

    Story indexes are kept (positions depend on them); a story that is not an object becomes an
    empty placeholder whose violations are not reported. None when the stories list itself is broken.
    """
    fixed = dict(data)
    stories = fixed.get("stories")
    if not isinstance(stories, list):
        return None
    stories = fixed["stories"] = [dict(s) if isinstance(s, dict) else s for s in stories]
    broken_at: set[tuple[int | None, str | None]] = set()
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if loc and loc[0] == "stories" and len(loc) >= 2 and isinstance(loc[1], int):
            index = loc[1]
            story = stories[index]
            if len(loc) == 2 or not isinstance(story, dict) or not isinstance(loc[2], str):
                stories[index] = {"id": f"{_PLACEHOLDER}{index}", "title": ""}
                broken_at.add((index, None))
                continue
            name = loc[2]
            story.pop(name, None)
            if name in ("id", "title"):
                story[name] = f"{_PLACEHOLDER}{index}" if name == "id" else ""
            broken_at.add((index, name))
        elif len(loc) >= 1 and isinstance(loc[0], str) and loc[0] != "stories":
            fixed.pop(loc[0], None)
            if loc[0] == "epicId":
                fixed["epicId"] = "placeholder"
            broken_at.add((None, loc[0]))
        else:
            return None
    try:
        plan = StoryPlan.model_validate(fixed)
    except ValidationError:
        return None
    broken = {(plan.stories[i].id if i is not None else None, name) for i, name in broken_at}
    return plan, broken


def _set_aside(found: list[Violation], broken: set[tuple[str | None, str | None]]) -> list[Violation]:
    """Rule violations of a salvaged plan, minus those about fields that were set aside."""
    kept = []
    for v in found:
        if v.story is not None and v.story.startswith(_PLACEHOLDER):
            continue
        if (v.story, v.field) in broken or (v.story, None) in broken:
            continue
        kept.append(v)
    return kept


def in_line_order(found: list[Violation]) -> list[Violation]:
    """Unpositioned problems (about the whole file) first, then by line and column."""
    return sorted(found, key=lambda v: (-1, 0) if v.line is None else (v.line, v.column or 0))


def parse_plan_text(text: str, *, markdown: bool) -> ParsedPlan:
    """Decode a plan from a JSON file's text, or from the storyplan block of a Markdown file."""
    index = LineIndex(text)
    if not markdown:
        # An editor may hand over a byte-order mark; skip it without shifting other positions.
        start = 1 if text.startswith("\ufeff") else 0
        return _decode(text, start, len(text), index, "the plan")
    match = _BLOCK.search(text)
    if match is None:
        empty = _BLOCK_EMPTY.search(text)
        if empty is not None:
            line, column = index.position(empty.start())
            v = Violation(
                code="plan.parse", message="the ```json storyplan block is empty", line=line, column=column
            )
            return ParsedPlan(None, Positions(), [v])
        v = Violation(
            code="plan.noBlock",
            message="no ```json storyplan fenced block in the story plan markdown; "
            "add one holding the plan's JSON",
            line=0,
            column=0,
            end_line=0,
            end_column=0,
        )
        return ParsedPlan(None, Positions(), [v])
    return _decode(text, match.start(1), match.end(1), index, "the ```json storyplan block")


def is_markdown(path: Path, text: str | None = None) -> bool:
    """Markdown by suffix; a file with another suffix whose text is not JSON but holds a block, too."""
    if path.suffix.lower() in MARKDOWN_SUFFIXES:
        return True
    if path.suffix.lower() == ".json" or text is None:
        return False
    return not text.lstrip().startswith(("{", "[")) and _BLOCK.search(text) is not None


def read_plan_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such plan file; check the path")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a plan file")
    except UnicodeDecodeError:
        raise InputError(f"{path}: is not UTF-8 text; save the plan as UTF-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the plan ({exc.strerror or exc})")


def check_text(text: str, *, markdown: bool) -> tuple[StoryPlan | None, list[Violation]]:
    """Parse and validate: the plan (None if it did not decode) and every violation, positioned."""
    parsed = parse_plan_text(text, markdown=markdown)
    if parsed.plan is None:
        found = list(parsed.violations)
        if parsed.salvaged is not None:
            found += _set_aside(violations(parsed.salvaged, parsed.positions), parsed.broken)
        return None, in_line_order(found)
    return parsed.plan, in_line_order(violations(parsed.plan, parsed.positions))


def check_plan_file(path: Path) -> list[Violation]:
    """Every violation of the plan file at `path` (an unreadable file is one `plan.unreadable`)."""
    try:
        text = read_plan_text(path)
    except InputError as exc:
        return [Violation(code="plan.unreadable", message=exc.message)]
    return check_text(text, markdown=is_markdown(path, text))[1]


def describe(shown: str, v: Violation) -> str:
    """One violation as every command prints it: `PLAN:LINE:COL: message` (1-based), like a compiler."""
    return f"{shown}:{v.located()}" if v.line is not None else f"{shown}: {v.message}"


def verdict(shown: str, count: int) -> str:
    return f"{shown}: invalid, {count} {'violation' if count == 1 else 'violations'}"


class PlanInvalid(InputError):
    """An invalid plan: its violations, one line each, then the verdict (what `plan validate` prints)."""

    def __init__(self, shown: str, found: list[Violation]) -> None:
        self.shown = shown
        self.violations = found
        super().__init__("\n".join([*(describe(shown, v) for v in found), verdict(shown, len(found))]))


def load_plan(path: Path, shown: str | None = None) -> StoryPlan:
    """The valid plan at `path`, or `PlanInvalid` (exit 2) listing every violation.

    `shown` is how the user named the file (a relative path), used in the messages.
    """
    text = read_plan_text(path)
    plan, found = check_text(text, markdown=is_markdown(path, text))
    if found or plan is None:
        raise PlanInvalid(shown or str(path), found)
    return plan
