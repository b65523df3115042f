"""Reading what each role answers (docs/prompts.md).

Agents are models: they wrap JSON in prose or fences, vary severity words, and decorate their last
line. These parsers accept what is unambiguous and otherwise raise `ReplyParseError` with a
message written to be sent back to the agent once ("your reply ...: <what is wrong>").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, Field

from flowd.events.model import JudgeIssue
from flowd.tasks.model import Task, TaskPlan

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)\n?[ \t]*```", re.DOTALL)
Severity = Literal["critical", "major", "minor"]
_SEVERITIES: dict[str, Severity] = {
    "critical": "critical",
    "blocker": "critical",
    "major": "major",
    "high": "major",
    "minor": "minor",
    "medium": "minor",
    "low": "minor",
    "nit": "minor",
    "info": "minor",
}


class ReplyParseError(ValueError):
    """A reply that does not parse; `message` is fit to send back to the agent."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _candidates(text: str) -> list[str]:
    stripped = text.strip()
    out = [stripped]
    fences = list(_FENCE.finditer(text))
    # `json`-tagged fences first, then untagged ones.
    out += [m.group(2) for m in fences if m.group(1).lower() == "json"]
    out += [m.group(2) for m in fences if m.group(1).lower() != "json"]
    return out


def extract_json(text: str) -> Any:
    """The JSON value of a reply: bare, in a ```json fence, or the first object/array in prose."""
    for candidate in _candidates(text):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) or (isinstance(value, list) and value):
            return value
    if not text.strip():
        raise ReplyParseError("your reply was empty: answer with the JSON object only")
    raise ReplyParseError("your reply holds no valid JSON: answer with the JSON object only, no prose")


def _text(value: Any, where: str, *, required: bool) -> str:
    if value is None:
        if required:
            raise ReplyParseError(f"your reply is missing {where}: give it as a string")
        return ""
    if not isinstance(value, str):
        raise ReplyParseError(f"your reply's {where} is not a string: give it as a string")
    return value


def parse_task_plan(text: str, story_id: str) -> TaskPlan:
    """`{"tasks": [{"title", "description"}]}` (a bare list of tasks is accepted too).

    The reply's `epicId` is ignored: the checkpoint and commits use `story_id`.
    """
    data = extract_json(text)
    raw = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise ReplyParseError(
            'your reply has no "tasks" list: answer with {"tasks": [{"title": ..., "description": ...}]}'
        )
    if not raw:
        raise ReplyParseError('your reply\'s "tasks" list is empty: plan at least one task')
    tasks = []
    for where, item in _objects(raw, "tasks", '{"title": ..., "description": ...}'):
        title = _text(item.get("title"), f"{where}.title", required=True).strip()
        if not title:
            raise ReplyParseError(f"your reply's {where}.title is empty: give every task a title")
        description = _text(item.get("description"), f"{where}.description", required=False)
        tasks.append(Task(title=title, description=description.strip()))
    return TaskPlan(story_id=story_id, tasks=tasks)


def _objects(raw: list[Any], name: str, shape: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each item of the reply's `name` list with where it is (`tasks[2]`); an item that is not an
    object stops the reading with a message that shows the `shape` wanted."""
    for i, item in enumerate(raw):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise ReplyParseError(f"your reply's {where} is not an object: give {shape}")
        yield where, item


class Verdict(BaseModel):
    """A reviewer's or judge's answer. Clean when no issue is critical or major."""

    issues: list[JudgeIssue] = Field(default_factory=list)
    summary: str = ""
    clean: bool = True

    @classmethod
    def of(cls, issues: list[JudgeIssue], summary: str = "") -> Verdict:
        return cls(
            issues=issues, summary=summary, clean=not any(i.severity in ("critical", "major") for i in issues)
        )

    @property
    def blocking(self) -> list[JudgeIssue]:
        return [i for i in self.issues if i.severity in ("critical", "major")]


def parse_verdict(text: str) -> Verdict:
    """`{"issues": [{"severity", "title", "description"}], "summary"}`."""
    data = extract_json(text)
    if isinstance(data, list):
        data = {"issues": data}
    if not isinstance(data, dict):
        raise ReplyParseError(
            'your reply is not a JSON object: answer with {"issues": [...], "summary": "..."}'
        )
    raw = data.get("issues", [])
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ReplyParseError(
            'your reply\'s "issues" is not a list: give a list of {"severity", "title", "description"}'
        )
    issues = []
    for where, item in _objects(raw, "issues", '{"severity", "title", "description"}'):
        severity_raw = _text(item.get("severity"), f"{where}.severity", required=True)
        severity = _SEVERITIES.get(severity_raw.strip().lower())
        if severity is None:
            raise ReplyParseError(
                f"your reply's {where}.severity '{severity_raw}' is not one of critical, major, minor"
            )
        title = _text(item.get("title"), f"{where}.title", required=False).strip()
        description = _text(item.get("description"), f"{where}.description", required=False).strip()
        if not title and not description:
            raise ReplyParseError(
                f"your reply's {where} has neither a title nor a description: say what is wrong"
            )
        issues.append(
            JudgeIssue(severity=severity, title=title or description.splitlines()[0], description=description)
        )
    summary = _text(data.get("summary"), "summary", required=False).strip()
    return Verdict.of(issues, summary)


class CoderSentinel(BaseModel):
    """What a coder's last line claims: a missing dependency, or that the task needed no change."""

    blocked_on: str | None = None
    already_satisfied: bool = False


_DECORATION = "`*_> \t"


def coder_sentinel(text: str) -> CoderSentinel:
    """Read `BLOCKED_ON: <need>` or `TASK_ALREADY_SATISFIED` on the last non-empty line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return CoderSentinel()
    last = lines[-1].strip().strip(_DECORATION)
    match = re.match(r"^BLOCKED_ON\s*:\s*(.*)$", last)
    if match:
        need = match.group(1).strip().strip(_DECORATION)
        return CoderSentinel(blocked_on=need or "an unnamed dependency")
    if last.rstrip(".").strip(_DECORATION) == "TASK_ALREADY_SATISFIED":
        return CoderSentinel(already_satisfied=True)
    return CoderSentinel()
