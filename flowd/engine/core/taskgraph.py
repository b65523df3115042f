"""Which of a story's tasks run next, and where (docs/plan-format.md: `Depends on:`). No I/O.

The story's own coder runs one task at a time in the story worktree (*home*); other ready tasks
run *aside*, each on a coder leased for it in its own worktree, up to `taskConcurrency` at once,
and merge back. A task that could not run aside (no coder free, or its merge-back conflicted or
failed) is home-only from then on; one whose merge-back conflicted is also picked for home last,
after the other ready tasks, so the story's branch has moved on when it is done again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from flowd.tasks.parsing import TaskNode, ready_tasks

# How a task run aside ended: merged back, no coder for it after all, its merge-back conflicted;
# None: it failed.
AsideOutcome = Literal["merged", "declined", "conflict"] | None


@dataclass
class TaskGraphState:
    nodes: list[TaskNode]
    done: set[int] = field(default_factory=set)
    home_only: set[int] = field(default_factory=set)
    run_last: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, nodes: list[TaskNode]) -> TaskGraphState:
        return cls(nodes, done={n.index for n in nodes if n.task.completed})

    @property
    def finished(self) -> bool:
        return len(self.done) >= len(self.nodes)

    def picks(self, running: Collection[int], *, home_free: bool) -> tuple[int | None, list[int]]:
        """The task the home coder takes now (None: it is busy or nothing is ready), and the
        tasks that may run aside, in plan order: the shell leases a coder for each in turn while
        fewer than `taskConcurrency` run, and tells `declined` of those it found none for."""
        ready = ready_tasks(self.nodes, self.done, running)
        home = None
        if home_free and ready:
            home = next((i for i in ready if i not in self.run_last), ready[0])
            ready.remove(home)
        return home, [i for i in ready if i not in self.home_only]

    def declined(self, index: int) -> None:
        """No coder was free for task `index` aside: it waits for home."""
        self.home_only.add(index)

    def home_done(self, index: int) -> None:
        self.done.add(index)

    def aside_done(self, index: int, outcome: AsideOutcome) -> bool:
        """Task `index` ended aside; True when it is done (merged back)."""
        if outcome == "merged":
            self.done.add(index)
            return True
        self.home_only.add(index)
        if outcome == "conflict":
            self.run_last.add(index)
        return False
