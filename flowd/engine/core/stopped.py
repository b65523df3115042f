"""What a story's outcome is when the run stops it: the scheduler's `StopAll` (a cancel, failFast)
cancels every running story task, and each ends one of three ways (docs/architecture.md: one run).

- It returned an outcome before the cancel reached it: that outcome stands, whatever it is (a
  `paused` one included: the pause is not asked, and the story's next run pauses again).
- The cancel stopped it (`None`): `cancelled`, resumable; the scheduler marks it waiting.
- It raised: `failed` with the error's sentence. A story task turns its own failures into
  outcomes (engine/core/failure.py), so this is a lane engine's own error.
"""

from __future__ import annotations

from flowd.engine.core.outcome import StoryOutcome

CANCELLED = "cancelled"


def when_stopped(story: str, ended: StoryOutcome | Exception | None) -> StoryOutcome:
    """The outcome of `story`'s task, cancelled by the run, from how it `ended`: what it returned,
    None when the cancel stopped it, or what it raised."""
    if isinstance(ended, StoryOutcome):
        return ended
    if ended is None:
        return StoryOutcome(story, "cancelled", reason=CANCELLED)
    return StoryOutcome(story, "failed", reason=str(ended) or type(ended).__name__)
