"""Why a story stops short of merged: the exceptions the shell raises and the failure policy
(`core/failure.py`) reads. They are the core's vocabulary, so they live here and the shell imports
them; `NoExecutor`, a user-facing error with its own exit code, lives in `flowd.base.errors`.
"""

from __future__ import annotations


class Halt(Exception):
    """Stop launching new work (budget spent, no executor, a dirty epic checkout)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoryFailed(Exception):
    """The story's own failure (a task that never came clean, red gates on merge…): it fails."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StoryWaiting(Exception):
    """The story stops as waiting (a genuine BLOCKED_ON): not a failure of its own."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BudgetHalt(Halt):
    """A spent budget: the epic's (`whole_run`) or the story's own. With `budget` in `pauseOn` it
    pauses instead of halting (engine/core/failure.py, docs/answers.md)."""

    def __init__(self, reason: str, *, whole_run: bool) -> None:
        super().__init__(reason)
        self.whole_run = whole_run


class AwaitingApproval(Exception):
    """The story's work is done and `merge` is in `pauseOn`: it waits for a person's approval before
    it enters the merge queue (engine/core/approval.py, docs/answers.md)."""

    def __init__(self, tasks: int) -> None:
        super().__init__(f"ready to merge with {tasks} task(s) done")
        self.reason = str(self)
        self.tasks = tasks
