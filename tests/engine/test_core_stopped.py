"""What a story's outcome is when the run stops it (engine/core/stopped.py), as a table."""

from __future__ import annotations

import pytest

from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.stopped import when_stopped

DONE = StoryOutcome("s1", "done", branch="story/ep/s1", note="merged at 0123456789")
FAILED = StoryOutcome("s1", "failed", reason="judge not cleared", branch="story/ep/s1")
PAUSED = StoryOutcome("s1", "paused", reason="blocked on the api", pause="blocked")


@pytest.mark.parametrize(
    ("ended", "expected"),
    [
        # Returned before the cancel reached it: its own outcome stands.
        (DONE, DONE),
        (FAILED, FAILED),
        (PAUSED, PAUSED),
        # The cancel stopped it: resumable.
        (None, StoryOutcome("s1", "cancelled", reason="cancelled")),
        # The lane engine's own error: the story fails with its sentence, or its type.
        (
            RuntimeError("the lane lost its remote"),
            StoryOutcome("s1", "failed", reason="the lane lost its remote"),
        ),
        (KeyError(), StoryOutcome("s1", "failed", reason="KeyError")),
    ],
)
def test_when_stopped(ended: StoryOutcome | Exception | None, expected: StoryOutcome) -> None:
    assert when_stopped("s1", ended) == expected
