"""A story's status in each vocabulary, and how they map (docs/architecture.md: Names).

- `StoryFileStatus`, the story state file's (`stories/<id>.json`): `started`, `merged`, `failed`;
  what a later run needs to skip, resume or start a story over. `merged` is the lane's `done` (and
  `skipped` in a later run, which finds it merged), `started` a lane not ended, `failed` the same.
- `StoryStatus`, a story's status in the trace (`StoryStatusChanged`), and `LaneStatus`, the
  lane's on `flow/lane`: the story statuses plus the merge train's `queued` and `merging`.
- `ReportStatus`, the report's: the lane status of the last run, `planned` for a story no run
  reached (`report_status`).
- `OutcomeStatus`, how one story's run ended for the scheduler; `lane_status_of` says which
  story status the trace shows for it.
- `RunOutcome`, how a run ended (`RunEnded.outcome`, `run.json`'s `outcome`), and `RunStatus`, a
  run's on `flow/run` and `flow/status`: `running`, `paused` (alive with only pauses left),
  `interrupted` (its process is gone without an end), or its outcome (`run_status_of`).

The values are the wire's (docs/protocol.md, docs/trace.md); they are spelled here only.
"""

from __future__ import annotations

from typing import Literal, get_args

StoryFileStatus = Literal["started", "merged", "failed"]
StoryStatus = Literal["planned", "active", "waiting", "ready", "done", "failed", "skipped"]
LaneStatus = Literal[StoryStatus, "queued", "merging"]
ReportStatus = LaneStatus
OutcomeStatus = Literal["done", "failed", "waiting", "cancelled", "paused"]
RunOutcome = Literal["done", "failed", "cancelled", "halted"]
RunStatus = Literal["running", "paused", "interrupted", RunOutcome]
RUN_OUTCOMES: tuple[RunOutcome, ...] = get_args(RunOutcome)


def lane_status_of(outcome: OutcomeStatus) -> StoryStatus:
    """The story status the trace shows for a run's outcome: done and failed as they are, the
    rest (waiting, cancelled, paused) `waiting`: the story is left to a later run or a person."""
    if outcome == "done" or outcome == "failed":
        return outcome
    return "waiting"


def report_status(lane: LaneStatus | None) -> ReportStatus:
    """The report's status of a story: its lane's in the last run, `planned` when it has none."""
    return lane if lane is not None else "planned"


def run_status_of(outcome: str | None) -> RunStatus:
    """The status of a run whose process is gone, from the outcome its `run.json` recorded:
    that outcome, or `interrupted` when it recorded none (killed) or one this flowd does not know."""
    for known in RUN_OUTCOMES:
        if outcome == known:
            return known
    return "interrupted"
