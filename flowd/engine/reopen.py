"""Reopen a story that is not running with a revision task, in its checkpoint on disk.

The in-process way is `TaskLoop.append_revision` (a running story's own plan); this one is for a
story whose run stopped (waiting, failed, paused) or another process: it appends `Revision <k>:
<subject>` (engine/core/revision.py) to `.flow/epics/<epic>/stories/<id>.plan.md`, atomically,
so the story's next run resumes at that task (docs/revisions.md).
"""

from __future__ import annotations

from flowd.base.fsio import write_text_atomic
from flowd.engine import prompts
from flowd.engine.core.revision import with_revision
from flowd.engine.state import EpicPaths
from flowd.tasks.checkpoint import parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task


def revision_description(lead: str, findings: str) -> str:
    """The body every revision task has: the lead, then the findings to close."""
    return prompts.REVISION_BODY.format(lead=lead, issues=findings)


def reopen_with_revision(
    paths: EpicPaths, story_id: str, subject: str, lead: str, findings: str
) -> Task | None:
    """Append the revision task to the story's checkpoint; None when the story has no checkpoint yet
    (its tasks are not planned: there is nothing to reopen, the caller says so)."""
    path = paths.checkpoint(story_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    plan = with_revision(parse_checkpoint(text, str(path)), subject, revision_description(lead, findings))
    write_text_atomic(path, render_checkpoint(plan))
    return plan.tasks[-1]
