"""Story plans: the model, parsing with positions, validation, graph queries and the story hash."""

from __future__ import annotations

from flowd.plan.graph import (
    critical_path_rank,
    dependencies_of,
    dependents_of,
    launch_order,
    ready,
    wave_of,
    waves,
)
from flowd.plan.hashing import story_hash
from flowd.plan.jsonpos import Positions, Span
from flowd.plan.markdown import render_plan_markdown
from flowd.plan.model import ID_PATTERN, Story, StoryPlan
from flowd.plan.parse import ParsedPlan, check_plan_file, load_plan, parse_plan_text
from flowd.plan.validate import violations
from flowd.plan.violation import Violation

__all__ = [
    "ID_PATTERN",
    "ParsedPlan",
    "Positions",
    "Span",
    "Story",
    "StoryPlan",
    "Violation",
    "check_plan_file",
    "critical_path_rank",
    "dependencies_of",
    "dependents_of",
    "launch_order",
    "load_plan",
    "parse_plan_text",
    "ready",
    "render_plan_markdown",
    "story_hash",
    "violations",
    "wave_of",
    "waves",
]
