"""Approve before merge (docs/answers.md: `merge`): when a finished story waits for a person's
approval, and what an answer (or a review comment) to that wait means. No I/O.

With `merge` in `pauseOn`, a story whose tasks are done (judged, with no review comments waiting)
asks before it enters the merge queue. An approval covers the story's task plan as it stood when
it was given: the number of tasks, all done. A story that takes another task after it (a revision
asked for in the answer, a review comment, a red merge sent back to its coder, the judge's
findings) asks again when that task is done; a story approved and then stopped (a kill, a cancel)
merges without asking twice.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

APPROVE = "approve"


@dataclass(frozen=True)
class Approve:
    """Merge the story as it is."""


@dataclass(frozen=True)
class Revise:
    """Send the story back to its coder: `text` becomes a revision task; None when the review
    comments already queued for it are the revision (they become tasks when it continues)."""

    text: str | None


Effect = Approve | Revise


class ApprovalRefused(ValueError):
    """An answer that decides nothing: `str(exc)` is the sentence to show."""


def approval_due(pause_on: Collection[str], approved_tasks: int | None, tasks: int) -> bool:
    """Whether a story with `tasks` tasks, all done, must ask before it merges; `approved_tasks`:
    how many tasks its last approval covered (None: never approved)."""
    return "merge" in pause_on and not is_approved(approved_tasks, tasks)


def is_approved(approved_tasks: int | None, tasks: int) -> bool:
    """Whether the story's last approval covers its plan as it stands (it was judged before it
    asked, so an approved story goes straight to its merge)."""
    return approved_tasks == tasks


def read_approval(text: str) -> Effect:
    """What an answer to a story waiting for approval means: `approve` (any case) merges it; any
    other text goes to its coder as a revision task; an empty answer is refused."""
    answer = text.strip()
    if answer.lower() == APPROVE:
        return Approve()
    if not answer:
        raise ApprovalRefused(
            "a story waiting for approval takes `approve` or the changes its coder should make"
        )
    return Revise(answer)


def on_review_comment() -> Effect:
    """A review comment on a story waiting for approval sends it back: the comment (already queued
    as the story's next task) is the revision, as a `Request changes` with it would be."""
    return Revise(None)


def effect_name(effect: Effect) -> Literal["approve", "revise"]:
    """The effect as `StoryAnswered.effect` records it, so the fold never reads the answer again."""
    return "approve" if isinstance(effect, Approve) else "revise"


def question(story: str, detail: str) -> tuple[str, list[str]]:
    """What the wait asks (`detail`: why it is ready) and the answers it offers (free text is
    always possible)."""
    return (
        f"Story {story} is {detail}: review its diff against the epic, "
        "then `approve` it, or say what its coder should change (review comments on its lines count too)",
        [APPROVE],
    )
