"""Review comments that become revision tasks (docs/answers.md: revisions): whether a story takes
one now, and which ones a resumed run still owes.

A comment reaches the runner as a request naming a story, a repository path and a line. The shell
gathers the facts (the story's lane status, whether its merge began, the file's line count) and
`admit` says whether the story takes it; every refusal changes nothing. An admitted comment is
recorded (`RevisionRequested`, with an id) before it is queued, and the task made from it names
that id in the story's task checkpoint, so `owed` can tell after a kill which comments were
recorded but never became tasks: those are queued again. The queue itself (`ReviewQueue`) is
plain state the run's context holds: admitted comments waiting per story, stories whose merge
began.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from flowd.events.statuses import LaneStatus


@dataclass(frozen=True)
class Requested:
    """A recorded review comment (`RevisionRequested`): `line` counts from 1."""

    id: str
    lane: str
    path: str
    line: int
    text: str
    quote: str | None = None


def marker(revision_id: str) -> str:
    """What a revision task's description carries to say which comment it was made from."""
    return f"(review comment {revision_id})"


class Refusal(Enum):
    UNKNOWN_STORY = "unknown story"
    MERGED = "merged"  # the story has merged into the epic: too late for its coder
    MERGING = "merging"  # its merge has begun: the next chance is a comment on the epic
    FAILED = "failed"  # failed in this run: nothing runs its coder again before a resume
    SKIPPED = "skipped"  # skipped in this run (a dependency failed)
    BAD_PATH = "bad path"  # absolute, or climbing out of the repository with `..`
    NO_FILE = "no file"  # no such file in the story's worktree (or the epic, before it starts)
    BAD_LINE = "bad line"  # the file has no such line


@dataclass(frozen=True)
class RevisionFacts:
    """What the shell knows about the story and the line when a comment arrives."""

    known: bool  # the run's plan has the story
    status: LaneStatus  # its lane's (`planned` before its lane starts)
    merged: bool  # its saved state says merged (possibly in an earlier run)
    merging: bool  # its merge began in this run (it takes no more comments)
    safe_path: bool  # relative, inside the repository
    lines: int | None  # the file's line count; None when there is no such file
    line: int


def admit(facts: RevisionFacts) -> Refusal | None:
    """None: the story takes the comment as a revision task; otherwise why not. The story's state
    is judged before the path (a merged story's file may be gone with its worktree)."""
    if not facts.known:
        return Refusal.UNKNOWN_STORY
    if facts.merged or facts.status == "done":
        return Refusal.MERGED
    if facts.merging:
        return Refusal.MERGING
    if facts.status == "failed":
        return Refusal.FAILED
    if facts.status == "skipped":
        return Refusal.SKIPPED
    if not facts.safe_path:
        return Refusal.BAD_PATH
    if facts.lines is None:
        return Refusal.NO_FILE
    # An empty file still has a line 1 to comment on.
    if not 1 <= facts.line <= max(facts.lines, 1):
        return Refusal.BAD_LINE
    return None


def owed(
    requested: Iterable[Requested], checkpoints: Mapping[str, str], merged: Collection[str]
) -> list[Requested]:
    """The recorded comments a resumed run must queue again, in the order they were made.

    A comment is owed unless its story's task checkpoint names it (it became a task, done or not:
    the checkpoint resumes that task itself) or the story has merged since. A story that starts
    over (its plan entry changed, its checkpoint discarded) owes every comment made on it again.
    """
    return [r for r in requested if r.lane not in merged and marker(r.id) not in checkpoints.get(r.lane, "")]


@dataclass
class ReviewQueue:
    """The run's admitted comments not yet made tasks, per story, and the stories whose merge began."""

    waiting: dict[str, list[Requested]] = field(default_factory=dict)
    merging: set[str] = field(default_factory=set)

    def add(self, revision: Requested) -> None:
        self.waiting.setdefault(revision.lane, []).append(revision)

    def take(self, story: str) -> list[Requested]:
        return self.waiting.pop(story, [])

    def close_if_idle(self, story: str) -> bool:
        """With nothing waiting for `story`, mark its merge begun (refusing later comments) and say
        True; False when comments wait (the story goes back for them first)."""
        if self.waiting.get(story):
            return False
        self.merging.add(story)
        return True

    def reopen(self, story: str) -> None:
        """The story goes back to its coder after its merge began (e.g. a red merge revised)."""
        self.merging.discard(story)
