"""A story's task plan: ordered tasks, each a small independently verifiable step."""

from __future__ import annotations

from pydantic import Field

from flowd.base.wire import WireModel


class Task(WireModel):
    title: str
    description: str = ""
    completed: bool = False


class TaskPlan(WireModel):
    """The tasks of one story, in order. Resume continues at the first unchecked task."""

    story_id: str
    tasks: list[Task] = Field(default_factory=list)
    brief: str | None = None

    def next_incomplete(self) -> tuple[int, Task] | None:
        """The first task not completed, with its 1-based index."""
        return next_incomplete(self)

    def completing(self, index: int) -> TaskPlan:
        """A copy with task `index` (1-based) completed."""
        tasks = [
            t.model_copy(update={"completed": True}) if i == index else t for i, t in enumerate(self.tasks, 1)
        ]
        return self.model_copy(update={"tasks": tasks})

    def appending(self, task: Task) -> TaskPlan:
        return self.model_copy(update={"tasks": [*self.tasks, task]})

    @property
    def done(self) -> bool:
        return all(t.completed for t in self.tasks)

    def prompt_for(self, task: Task) -> str:
        """The task's prompt: its description, after the brief when there is one."""
        return f"{self.brief}\n\n---\n\n{task.description}" if self.brief else task.description


def next_incomplete(plan: TaskPlan) -> tuple[int, Task] | None:
    for index, task in enumerate(plan.tasks, start=1):
        if not task.completed:
            return index, task
    return None
