"""Review comments from the editor and the CLI become revision tasks (docs/answers.md: revisions).

The runner's `RequestDesk` hands each `Revision` request to `take_revision`: it gathers the facts
(the story's lane, its saved state, the file in the story's worktree), asks the core
(`engine/core/review_comments.py`) whether the story takes it, records `RevisionRequested` and queues it
on the run's `ReviewQueue` (pure state, `engine/core/review_comments.py`, held by the context). The story's task loop empties its queue before each next task
(`append_revisions`), so a running story's coder takes the comment right after its current task, a
story that has not started takes it after its task plan, and a story past its tasks goes back for
it before its merge begins (`ReviewQueue.close_if_idle`, called under the merge lock). A run that
starts on a trace with recorded comments that never became tasks queues them again (`carry_over`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path, PurePosixPath

from flowd.base.errors import FlowdError
from flowd.base.fsio import open_inside
from flowd.engine.context import RunContext
from flowd.engine.core.review_comments import Refusal, Requested, RevisionFacts, admit, marker, owed
from flowd.engine.core.revision import REVIEW_COMMENT, with_task
from flowd.engine.state import load_state
from flowd.events.model import Info, RevisionRequested, parse_line
from flowd.store.inbox import Reply, Revision
from flowd.tasks.model import TaskPlan
from flowd.trace.log import list_runs, trace_path

QUOTE_CHARS = 300
READ_BYTES = 16 << 20  # of a file a review comment names: its lines are counted in this much

REVISION_TASK = """A reviewer commented on line {line} of `{path}` in this story's change.
{quote}
Comment: {text}

Change the code so the comment is addressed, inside your owned paths and without weakening any test.
{marker}"""


def append_revisions(plan: TaskPlan, taken: list[Requested]) -> TaskPlan:
    """`plan` with one `Review comment <k>: <path>:<line>` task per comment, in order. No
    `Depends on:` line: with parallel tasks it waits for every task and runs at home."""
    for revision in taken:
        quote = f"\nThe line read then:\n    {revision.quote}\n" if revision.quote is not None else ""
        body = REVISION_TASK.format(
            line=revision.line,
            path=revision.path,
            quote=quote,
            text=revision.text,
            marker=marker(revision.id),
        )
        plan = with_task(plan, REVIEW_COMMENT, f"{revision.path}:{revision.line}", body)
    return plan


# -- the desk: admitting a comment --------------------------------------------------------------


def take_revision(ctx: RunContext, request: Revision) -> Reply:
    """Admit `request` (record it and queue it for the story's coder) or refuse it, changing nothing."""
    story = request.story
    path = _clean_path(request.path)
    lane = ctx.view.lanes.get(story)
    status = lane.status if lane is not None else "planned"
    lines: list[str] | None = None
    if path is not None and ctx.plan.story(story) is not None:
        lines = _lines_now(ctx, story, path)
    facts = RevisionFacts(
        known=ctx.plan.story(story) is not None,
        status=status,
        merged=_merged(ctx, story),
        merging=story in ctx.reviews.merging,
        safe_path=path is not None,
        lines=None if lines is None else len(lines),
        line=request.line,
    )
    refusal = admit(facts)
    if refusal is not None:
        return Reply(ok=False, message=_refusal_message(ctx, request, refusal, facts))
    assert path is not None and lines is not None
    quote = lines[request.line - 1][:QUOTE_CHARS] if request.line <= len(lines) else ""
    revision = Requested(
        id=secrets.token_hex(4), lane=story, path=path, line=request.line, text=request.text, quote=quote
    )
    ctx.emit(
        RevisionRequested(
            lane=story,
            path=path,
            line=request.line,
            text=request.text,
            by=request.by,
            id=revision.id,
            quote=quote,
        )
    )
    ctx.reviews.add(revision)
    pauses = ctx.pauses
    if pauses is not None and pauses.waits_for_approval(story):
        # Waiting for approval: the comment sends it back now (engine/core/approval.py).
        return Reply(ok=True, message=pauses.send_back(story, request.by, f"{path}:{request.line}"))
    when = "next, after its current task" if status == "active" else "when it starts or continues"
    return Reply(ok=True, message=f"Story {story} takes the revision on {path}:{request.line} {when}.")


def _clean_path(raw: str) -> str | None:
    """The repository-relative path, or None when it is absolute or climbs out."""
    text = raw.replace("\\", "/").strip()
    pure = PurePosixPath(text)
    if not text or pure.is_absolute() or ".." in pure.parts:
        return None
    parts = [p for p in pure.parts if p != "."]
    return "/".join(parts) if parts else None


def _lines_now(ctx: RunContext, story: str, path: str) -> list[str] | None:
    """The file's lines where the story's files are now: its worktree, or the epic before it has
    one (the epic branch: the run may not have checked the epic worktree out yet)."""
    own = ctx.story_worktree(story)
    if (own / ".git").exists():
        return _read_lines(own, path)
    if ".git" in PurePosixPath(path).parts:
        return None
    with contextlib.suppress(FlowdError):
        text = ctx.repo.file_text(ctx.epic_branch, path)
        return text.splitlines() if text is not None else None
    return None


def _read_lines(root: Path, path: str) -> list[str] | None:
    """The file's lines (of its first `READ_BYTES`); None when it is not a regular file inside
    `root` (a symlink out of the worktree, or git's own files, name no line of the story's
    change). Read by flowd, unconfined, where a lane writes: opened so that no link swapped in
    after the look leads out (`open_inside`)."""
    if ".git" in PurePosixPath(path).parts:
        return None
    real_root = os.path.realpath(root)
    with open_inside(Path(os.path.realpath(root / path)), real_root) as handle:
        if handle is None:
            return None
        data = handle.read(READ_BYTES)
    return data.decode("utf-8", errors="replace").splitlines()


def _merged(ctx: RunContext, story: str) -> bool:
    with contextlib.suppress(FlowdError, OSError, ValueError):
        state = load_state(ctx.paths, story)
        return state is not None and state.status == "merged"
    return False


def _refusal_message(ctx: RunContext, request: Revision, refusal: Refusal, facts: RevisionFacts) -> str:
    story, run = request.story, ctx.run_id
    where = f"{request.path}:{request.line}"
    if refusal is Refusal.UNKNOWN_STORY:
        return f"Run {run} has no story {story}; its stories are {', '.join(ctx.plan.ids)}."
    if refusal is Refusal.MERGED:
        return (
            f"Story {story} has already merged into {ctx.epic_branch}; "
            "nothing was changed (review the epic branch instead)."
        )
    if refusal is Refusal.MERGING:
        return (
            f"Story {story} is merging into {ctx.epic_branch} now and takes no more revisions; "
            "nothing was changed."
        )
    if refusal is Refusal.FAILED:
        return f"Story {story} failed in run {run}; nothing was changed (resume the run to work on it again)."
    if refusal is Refusal.SKIPPED:
        return f"Story {story} was skipped in run {run} (a story it depends on failed); nothing was changed."
    if refusal is Refusal.BAD_PATH:
        return (
            f"The path {request.path!r} must be relative to the repository, inside it; nothing was changed."
        )
    if refusal is Refusal.NO_FILE:
        return f"There is no file {request.path} in story {story}'s worktree; nothing was changed."
    return (
        f"{where} is past the end of the file ({facts.lines} line(s)) in story {story}'s worktree; "
        "nothing was changed."
    )


# -- resume -------------------------------------------------------------------------------------


def carry_over(ctx: RunContext) -> list[Requested]:
    """Queue again the comments recorded in this epic's runs (this one included: a resume may get a
    new run id) that never became tasks, because a runner was killed or cancelled in between."""
    requested = _recorded(ctx)
    lanes = {r.lane for r in requested if ctx.plan.story(r.lane) is not None}
    checkpoints = {lane: _read_text(ctx.paths.checkpoint(lane)) for lane in lanes}
    merged = {lane for lane in lanes if _merged(ctx, lane)}
    due = [r for r in owed(requested, checkpoints, merged) if r.lane in lanes]
    for revision in due:
        ctx.reviews.add(revision)
        ctx.emit(
            Info(
                lane=revision.lane,
                message=f"the revision on {revision.path}:{revision.line} asked before the restart is still due",
            )
        )
    return due


def _recorded(ctx: RunContext) -> list[Requested]:
    """Every `RevisionRequested` of the epic's runs, oldest run first, once per id. Only lines that
    name the type are parsed: traces are long and these events few."""
    runs = [r.run_id for r in reversed(list_runs(ctx.repo.root)) if r.epic_id == ctx.epic_id]
    if ctx.run_id not in runs:
        runs.append(ctx.run_id)
    found: dict[str, Requested] = {}
    for run_id in runs:
        try:
            with trace_path(ctx.repo.root, run_id).open("rb") as lines:
                for line in lines:
                    if b'"RevisionRequested"' not in line:
                        continue
                    envelope = parse_line(line)
                    event = envelope.event if envelope is not None else None
                    if isinstance(event, RevisionRequested) and event.id is not None:
                        found.setdefault(
                            event.id,
                            Requested(event.id, event.lane, event.path, event.line, event.text, event.quote),
                        )
        except OSError:
            continue
    return list(found.values())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""
