"""A coder's `BLOCKED_ON:` against the plan (docs/prompts.md): when the plan already settles the
dependency the coder says it misses, the one answer it gets back instead of a pause. No I/O."""

from __future__ import annotations

from flowd.plan.graph import dependencies_of, dependents_of
from flowd.plan.model import StoryPlan
from flowd.plan.perimeter import owner_of_path


def rebuttal(plan: StoryPlan, story_id: str, need: str) -> str | None:
    """The plan's answer to story `story_id`'s claimed missing dependency `need`, or None when
    the plan does not settle it (then the story waits on a person)."""
    deps = set(dependencies_of(plan, story_id))
    later = set(dependents_of(plan, story_id))
    for token in need.replace(",", " ").split():
        path = token.strip("`'\"()[]:;.")
        if "/" not in path and "." not in path:
            continue  # a word, not a path
        owner = owner_of_path(plan, path)
        if owner == story_id:
            return f"{path} is under your own owned paths: building it is this story's work"
        if owner in later:
            return f"{path} belongs to story '{owner}', which runs AFTER you: leave it alone"
        if owner in deps:
            dep = plan.require(owner)
            provides = f" That story provides: {', '.join(dep.provides)}." if dep.provides else ""
            return (
                f"{path} belongs to story '{owner}', merged into the epic branch before you started, "
                f"so it is already in your working tree.{provides}"
            )
    return None
