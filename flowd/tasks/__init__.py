"""A story's task plan: the model, its Markdown checkpoint, and the planner's per-task lines."""

from __future__ import annotations

from flowd.tasks.checkpoint import CheckpointError, parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task, TaskPlan, next_incomplete
from flowd.tasks.parsing import (
    TaskNode,
    depends_on,
    has_parallel_tasks,
    owns,
    ready_tasks,
    satisfies,
    task_nodes,
)

__all__ = [
    "CheckpointError",
    "Task",
    "TaskNode",
    "TaskPlan",
    "depends_on",
    "has_parallel_tasks",
    "next_incomplete",
    "owns",
    "parse_checkpoint",
    "ready_tasks",
    "render_checkpoint",
    "satisfies",
    "task_nodes",
]
