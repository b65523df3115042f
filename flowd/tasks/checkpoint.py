"""The task checkpoint `.flow/epics/<epicId>/stories/<storyId>.plan.md` (docs/architecture.md).

Readable Markdown that is also the resume state:

    # Plan: <storyId>

    ## [x] First task
    Its description.

    ## [ ] Second task
    ...

    # Brief

    Optional brief text.

The original splits tasks at every line starting with `## `, so a description line like
`## Notes` broke its task. Rendering here escapes such lines (and `# Brief`) with one leading
backslash, and parsing removes it, so any description survives a round trip; a hand-written
`## ` line that does not read as a task header is reported, not silently merged.
"""

from __future__ import annotations

import re

from flowd.base.errors import InputError
from flowd.tasks.model import Task, TaskPlan

_HEADER = "# Plan: "
_TASK = re.compile(r"^## \[([ xX])\](?: (.*))?$")
# A line whose first non-blank text is `#`, possibly behind backslashes we added before.
_NEEDS_ESCAPE = re.compile(r"^([ \t]*)(\\*#)")
_ESCAPED = re.compile(r"^([ \t]*)\\(\\*#)")


class CheckpointError(InputError):
    """A task checkpoint that does not parse; the message names the line."""


def _escape(line: str) -> str:
    return _NEEDS_ESCAPE.sub(lambda m: m.group(1) + "\\" + m.group(2), line, count=1)


def _unescape(line: str) -> str:
    return _ESCAPED.sub(lambda m: m.group(1) + m.group(2), line, count=1)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_checkpoint(plan: TaskPlan) -> str:
    blocks = [f"{_HEADER}{_one_line(plan.story_id)}"]
    for task in plan.tasks:
        mark = "x" if task.completed else " "
        body = "\n".join(_escape(line) for line in task.description.strip().splitlines())
        block = f"## [{mark}] {_one_line(task.title)}" + (f"\n{body}" if body else "")
        blocks.append(block.rstrip())
    if plan.brief:
        blocks.append("# Brief\n\n" + "\n".join(_escape(line) for line in plan.brief.strip().splitlines()))
    return "\n\n".join(blocks) + "\n"


def parse_checkpoint(text: str, source: str = "the task checkpoint") -> TaskPlan:
    """The task plan in `text`; `CheckpointError` naming `source` and the line when malformed."""
    lines = text.replace("\r\n", "\n").split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or not lines[first].strip().startswith(_HEADER):
        raise CheckpointError(f"{source}: expected a '# Plan: <storyId>' header on its first line")
    story_id = lines[first].strip()[len(_HEADER) :].strip()
    body = lines[first + 1 :]
    brief: str | None = None
    for i, line in enumerate(body):
        if line.strip() == "# Brief":
            brief = "\n".join(_unescape(b) for b in body[i + 1 :]).strip() or None
            body = body[:i]
            break

    tasks: list[Task] = []
    header: tuple[int, re.Match[str]] | None = None
    chunk: list[str] = []

    def flush() -> None:
        if header is None:
            if any(line.strip() for line in chunk):
                raise CheckpointError(f"{source}: text before the first '## [ ] <title>' task")
            return
        _, match = header
        description = "\n".join(_unescape(line) for line in chunk).strip()
        tasks.append(
            Task(
                title=(match.group(2) or "").strip(), description=description, completed=match.group(1) != " "
            )
        )

    for offset, line in enumerate(body):
        if line.startswith("## "):
            flush()
            match = _TASK.match(line.rstrip())
            if match is None:
                line_no = first + 2 + offset
                raise CheckpointError(
                    f"{source}: malformed task header on line {line_no}: {line.strip()!r} "
                    "(expected '## [ ] <title>' or '## [x] <title>')"
                )
            header = (offset, match)
            chunk = []
        else:
            chunk.append(line)
    flush()
    return TaskPlan(story_id=story_id, tasks=tasks, brief=brief)
