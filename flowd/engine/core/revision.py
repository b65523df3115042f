"""Revision tasks and merge revisions: reopening a story with one more task (docs/revisions.md).

A *revision task* is appended to a story's task plan (its checkpoint) as `Revision <k>: <subject>`;
it has no `Depends on:`, so it waits for every earlier task and runs in the story worktree on the
story's coder, through the task loop's review and gates like any task. The judge's findings, a
red epic gate after a merge reopen a story this way; a review comment from the editor appends a
`Review comment <k>: <path>:<line>` task the same way (`with_task`).

A *merge revision*: the story merged, the epic gates went red, the merge was undone. Up to
`mergeRevisionRounds` times the story reopens with the revision task `make the epic gates green
after merging` carrying the gate's output, then merges again; past the limit it fails as before.
The rounds done are counted from the checkpoint's revision tasks, so a run killed mid-revision
(or a later run of the epic) counts the rounds already taken and resumes at the unchecked task;
a story that failed gets a fresh allowance when it is run again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowd.tasks.model import Task, TaskPlan

MERGE_SUBJECT = "make the epic gates green after merging"
REVISION_TITLE = re.compile(r"^Revision (\d+): (.*)$")
OUTPUT_CHARS = 2000  # of the gate output kept in `MergeRevision` (the task carries all of it)

# The kinds of task appended to a story's plan after it was planned, each numbered on its own:
# `Revision <k>` (judge findings, red epic gates, a merge revision) and `Review comment <k>` (a
# comment the user left in the editor, docs/answers.md).
REVISION = "Revision"
REVIEW_COMMENT = "Review comment"


def task_number(plan: TaskPlan, kind: str) -> int:
    """The number the next appended task of `kind` in `plan` gets (1 for the first)."""
    title = re.compile(rf"^{re.escape(kind)} (\d+): ")
    numbers = [int(m[1]) for t in plan.tasks if (m := title.match(t.title))]
    return max(numbers, default=0) + 1


def with_task(plan: TaskPlan, kind: str, subject: str, description: str) -> TaskPlan:
    """`plan` with the unchecked task `<kind> <k>: <subject>` appended."""
    title = f"{kind} {task_number(plan, kind)}: {subject}"
    return plan.appending(Task(title=title, description=description))


def with_revision(plan: TaskPlan, subject: str, description: str) -> TaskPlan:
    """`plan` with the task `Revision <k>: <subject>` appended, unchecked."""
    return with_task(plan, REVISION, subject, description)


def is_merge_revision(task: Task) -> bool:
    match = REVISION_TITLE.match(task.title)
    return match is not None and match[2] == MERGE_SUBJECT


def merge_rounds_done(plan: TaskPlan) -> int:
    """How many merge revisions the story has had (its checkpoint's merge revision tasks)."""
    return sum(1 for t in plan.tasks if is_merge_revision(t))


def rounds_not_counted(plan: TaskPlan, resumed_from: str | None) -> int:
    """Merge revisions of earlier attempts that do not count against this one.

    Running a story that *failed* again is a fresh try: its earlier rounds are spent, so they are
    not counted (`resumed_from` is the status its state had, `failed`). A story stopped while
    `started` (killed, cancelled, halted) counts every round it took: it goes on where it was."""
    return merge_rounds_done(plan) if resumed_from == "failed" else 0


def resuming_round(plan: TaskPlan) -> int | None:
    """The merge revision round a resumed story is in the middle of (its next task is one), or None."""
    found = plan.next_incomplete()
    if found is None or not is_merge_revision(found[1]):
        return None
    return sum(1 for t in plan.tasks[: found[0]] if is_merge_revision(t))


@dataclass(frozen=True)
class Revise:
    """Reopen the story with merge revision `round` (1-based), then merge again."""

    round: int


@dataclass(frozen=True)
class RevisionsSpent:
    """Fail the story with `reason`."""

    reason: str


def after_red_merge(rounds_done: int, limit: int, output: str) -> Revise | RevisionsSpent:
    """The epic gates were red on the story's merge (already undone): revise, or fail.

    `rounds_done` merge revisions were already made; `limit` is `mergeRevisionRounds` (0 fails at the
    first red merge, as before merge revisions existed)."""
    if rounds_done < limit:
        return Revise(rounds_done + 1)
    after = ""
    if rounds_done:
        after = f" (after {rounds_done} merge revision{'s' if rounds_done != 1 else ''})"
    return RevisionsSpent(f"epic gates failed after merging{after}; merge undone:\n{output}")


@dataclass(frozen=True)
class Cleared:
    """The judge cleared the story: `note` says how (its code may have been there already)."""

    note: str


def after_judge(
    round_: int, rounds: int, *, clean: bool, empty: bool, issues: str
) -> Cleared | Revise | RevisionsSpent:
    """Judge round `round_` of `rounds` (`judgeRounds`) found the story `clean` or not, on a
    diff against the epic that is `empty` or not: cleared, one more revision task, or failed."""
    if clean:
        return Cleared(
            f"verified already in place (round {round_})" if empty else f"judge cleared (round {round_})"
        )
    if round_ < rounds:
        return Revise(round_)
    revisions = round_ - 1
    plural = "revision" if revisions == 1 else "revisions"
    if empty:
        return RevisionsSpent(
            f"the story's code is not in place after {revisions} {plural}, and its branch has no changes:\n{issues}"
        )
    return RevisionsSpent(f"judge not cleared after {revisions} {plural}:\n{issues}")
