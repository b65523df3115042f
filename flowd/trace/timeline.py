"""A lane's timeline (docs/graph.md): its phases in order, each a span of trace times, and the
rules that move a lane from one phase to the next. `RunView` (trace/view.py) decides which event
moves which lane; these functions keep the list of spans right."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from flowd.base.timeutil import iso, parse_iso

# A lane's phases on the timeline (docs/graph.md), in the order a story usually goes through them.
PHASES = ("planned", "coding", "gated", "queued", "merging", "merged", "paused", "failed")
# The phases a lane ends in: drawn as a point at the time it got there.
FINAL_PHASES = ("merged", "failed")
# The finest a picture of the timeline divides a lane's life: every picture draws the whole run
# over at most this many columns (the report's and VS Code's SVG bars are 720 and 640 px wide, the
# Neovim bar fewer characters). A span that ends shorter than its lane's life so far divided by
# this is less than a column in any picture drawn then or later (a lane's life only grows), so
# it is merged into the span before it (docs/graph.md): a long run's timeline stays a few
# thousand spans, however many gates its lanes ran. 0 keeps every span.
COLUMNS = 1000
# The phases merged so: a story's work, where each task gate adds two spans. The others happen a
# few times in a story's life and each says something (its turn in the queue, a merge, a pause),
# so they are kept whatever their length, as are the points.
FOLDED = ("coding", "gated")
# A story status (StoryStatusChanged, or a lane status the merge train or approval sends) → phase.
PHASE_OF_STATUS = {
    "active": "coding",
    "waiting": "paused",
    "ready": "paused",
    "queued": "queued",
    "merging": "merging",
    "failed": "failed",
}


@dataclass
class PhaseSpan:
    """One stretch of a lane's timeline: `end` None while it lasts (final phases end where they start)."""

    phase: str
    start: str
    end: str | None = None


def gate_times(phases: list[PhaseSpan], where: str, start: str, at: str) -> None:
    """A task gate is `gated` for as long as it ran; the epic gates a story's merge runs (without
    the merge train, which says `MergeBatchStarted`) make its wait in the queue `merging`."""
    current = phases[-1].phase if phases else None
    if where == "task" and current in ("coding", "gated"):
        enter(phases, "gated", start)
        enter(phases, "coding", at)
    elif where == "epic" and current == "queued":
        enter(phases, "merging", start)


def enter(phases: list[PhaseSpan], phase: str, at: str) -> None:
    """The lane is in `phase` from `at` on (a repeat of the current phase changes nothing)."""
    last = phases[-1] if phases else None
    if last is not None and last.end is None and last.start >= at and len(phases) > 1:
        phases.pop()  # an instant in between (coding again as a gate ends and the task too)
        last = phases[-1]
        if last.phase == phase and last.end == at:
            last.end = None
            return
    if last is not None:
        if last.end is None and last.phase == phase:
            return
        if last.phase in FINAL_PHASES and phase == last.phase:
            return
        at = max(at, last.start)  # a gate's computed start may reach back before the last change
        if last.end is None:
            last.end = at
            if _unseen(phases):  # merged into the span before it, which may go on in `phase`
                phases.pop()
                before = phases[-1]
                before.end = None if before.phase == phase else at
                if before.end is None:
                    return
    end = at if phase in FINAL_PHASES else None
    phases.append(PhaseSpan(phase, at, end))


def _unseen(phases: list[PhaseSpan]) -> bool:
    """The last span, just ended, is too short for any picture to show apart from the span
    before it (`COLUMNS`); both are a story's work (`FOLDED`), and they touch."""
    if COLUMNS <= 0 or len(phases) < 2:
        return False
    last, before = phases[-1], phases[-2]
    if last.phase not in FOLDED or before.phase not in FOLDED or before.end != last.start:
        return False
    end = _ms(last.end or last.start)
    return (end - _ms(last.start)) * COLUMNS < end - _ms(phases[0].start)


def _ms(at: str) -> int:
    """Milliseconds since the epoch of a trace time (0 for one no clock holds)."""
    try:
        if len(at) == 24 and at[0] in "12" and at[19] == "." and at[20:23].isdigit() and at[23] == "Z":
            moment = datetime.fromisoformat(at[:23])  # the writer's own form: naive UTC
            return (moment - _EPOCH) // _MS
        return int(parse_iso(at).timestamp() * 1000)
    except (ValueError, OverflowError):
        return 0


_EPOCH = datetime(1970, 1, 1)
_MS = timedelta(milliseconds=1)


def close(phases: list[PhaseSpan], at: str) -> None:
    if phases and phases[-1].end is None:
        phases[-1].end = max(at, phases[-1].start)


def minus_ms(at: str, ms: int) -> str:
    try:
        if len(at) == 24 and at[0] in "12" and at[19] == "." and at[20:23].isdigit() and at[23] == "Z":
            # The writer's own form (docs/trace.md), once per gate result of every fold: the same
            # result as the general path below at a third of its cost.
            moment = datetime.fromisoformat(at[:23]) - timedelta(milliseconds=ms)
            return moment.isoformat(timespec="milliseconds") + "Z"
        return iso(parse_iso(at) - timedelta(milliseconds=ms))
    except (ValueError, OverflowError):  # a duration no clock holds (a corrupt line): no start
        return at
