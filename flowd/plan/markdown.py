"""The Markdown form of a story plan (docs/plan-format.md): prose for people, one block for flowd.

The prose is regenerated from the block, so editing the block is how a plan changes.
"""

from __future__ import annotations

import json

from flowd.plan.graph import waves
from flowd.plan.model import StoryPlan


def _prose(text: str) -> str:
    # A fence in the prose could open a block before the real one; the block is what counts.
    return text.replace("```", "'''")


def _items(values: list[str]) -> str:
    return ", ".join(f"`{_prose(v)}`" for v in values) if values else "none"


def render_plan_markdown(plan: StoryPlan) -> str:
    lines = [f"# Epic: {plan.epic_id}", ""]
    if plan.epic.strip():
        lines += [_prose(plan.epic.strip()), ""]
    lines += ["## Waves", ""]
    lines += [f"{n}. {', '.join(wave)}" for n, wave in enumerate(waves(plan), start=1)] or ["none"]
    lines += ["", "## Stories", ""]
    for story in plan.stories:
        lines += [f"### {story.id} — {_prose(story.title)}", ""]
        if story.description.strip():
            lines += [_prose(story.description.strip()), ""]
        if story.acceptance:
            lines += ["Done when:", ""]
            lines += [f"{n}. {_prose(a)}" for n, a in enumerate(story.acceptance, start=1)]
            lines += [""]
        lines += [
            f"- depends on: {_items(story.depends_on)}",
            f"- owned: {_items(story.owned)}",
            f"- shared read-only: {_items(story.shared_read_only)}",
            f"- read first: {_items(story.read_first)}",
            f"- provides: {_items(story.provides)}",
            "",
        ]
    block = json.dumps(plan.model_dump(mode="json", by_alias=True), indent=2, ensure_ascii=False)
    lines += [
        "## Plan block",
        "",
        "Edit this block to change the plan; the prose above is regenerated from it.",
        "",
        "```json storyplan",
        block,
        "```",
        "",
    ]
    return "\n".join(lines)
