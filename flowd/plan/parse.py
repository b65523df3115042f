"""Reading a story plan file: JSON, or Markdown with one ```` ```json storyplan ```` block.

Parsing keeps where every story and field sits in the file, so the language server and
`flowd plan validate` point at the offending line. Parsing does not validate: "unparseable" and
"invalid" stay distinguishable, yet `load_plan` and `check_plan_file` report both kinds together.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flowd.errors import FileProblems, InputError
from flowd.plan.jsonpos import LineIndex, Positions, Span, scan_positions
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


def _at(span: Span | None, violation: Violation) -> Violation:
    if span is None:
        return violation
    return violation.model_copy(
        update={
            "line": span.line,
            "column": span.column,
            "end_line": span.end_line,
            "end_column": span.end_column,
        }
    )


def _loc_text(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _shape_violations(exc: ValidationError, data: Any, positions: Positions) -> list[Violation]:
    found = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        where = _loc_text(loc)
        message = error["msg"]
        if error["type"] == "missing":
            message = "is required"
        story: str | None = None
        field_name: str | None = None
        if len(loc) >= 2 and loc[0] == "stories" and isinstance(loc[1], int):
            stories = data.get("stories") if isinstance(data, dict) else None
            if isinstance(stories, list) and loc[1] < len(stories) and isinstance(stories[loc[1]], dict):
                raw_id = stories[loc[1]].get("id")
                story = raw_id if isinstance(raw_id, str) else None
            if len(loc) >= 3 and isinstance(loc[2], str):
                field_name = loc[2]
        text = f"{where}: {message}" if where else message
        found.append(
            _at(
                positions.find(loc), Violation(code="plan.shape", message=text, story=story, field=field_name)
            )
        )
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
            None, positions, [_at(positions.values.get(()), Violation(code="plan.shape", message=message))]
        )
    try:
        plan = StoryPlan.model_validate(data)
    except ValidationError as exc:
        return ParsedPlan(None, positions, _shape_violations(exc, data, positions))
    return ParsedPlan(plan, positions, [])


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
        return None, parsed.violations
    return parsed.plan, violations(parsed.plan, parsed.positions)


def check_plan_file(path: Path) -> list[Violation]:
    """Every violation of the plan file at `path` (an unreadable file is one `plan.unreadable`)."""
    try:
        text = read_plan_text(path)
    except InputError as exc:
        return [Violation(code="plan.unreadable", message=exc.message)]
    return check_text(text, markdown=is_markdown(path, text))[1]


def load_plan(path: Path) -> StoryPlan:
    """The valid plan at `path`, or `InputError` (exit 2) naming the file and every violation."""
    text = read_plan_text(path)
    plan, found = check_text(text, markdown=is_markdown(path, text))
    if found or plan is None:
        raise FileProblems(str(path), [_human(v) for v in found])
    return plan


def _human(v: Violation) -> str:
    return f"line {v.line + 1}: {v.message}" if v.line is not None else v.message
