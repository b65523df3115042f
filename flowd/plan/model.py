"""The story plan (docs/plan-format.md): an epic split into stories, each with an owned perimeter.

The models only decode shapes. Rules that span fields or stories (kebab-case ids, non-empty
`owned`, overlaps, cycles, safe paths) live in `flowd.plan.validate`, so that one pass can report
every violation at once with its position instead of stopping at the first pydantic error. The
JSON Schema still carries those rules (`pattern`, `minItems`) so editors flag them while typing.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from flowd.base import layout
from flowd.base.wire import WireModel

ID_PATTERN = r"^[a-z0-9][a-z0-9-]*$"

_PATH_LIST_NOTE = (
    "Repository-relative paths (files or folders, `/` separators); a folder covers everything under "
    "it, segment-aware (`src/a` does not contain `src/ab`). A trailing `/*` or `/**` reads as the folder."
)


def _schema(**extra: Any) -> dict[str, Any]:
    return dict(extra)


class Story(WireModel):
    """One agent-sized piece of the epic, run in its own worktree and merged behind the gates."""

    id: str = Field(
        description="Kebab-case id, unique in the plan; names the branch `story/<epicId>/<id>`.",
        json_schema_extra=_schema(pattern=ID_PATTERN),
    )
    title: str = Field(description="A short human title.")
    description: str = Field(default="", description="What to build, for the coder and the judge.")
    owned: list[str] = Field(
        default_factory=list,
        description="Paths this story may create or change (at least one). "
        "No two stories may own overlapping paths. " + _PATH_LIST_NOTE,
        json_schema_extra=_schema(minItems=1),
    )
    shared_read_only: list[str] = Field(
        default_factory=list,
        description="Paths given to the coder as context; changing them is a perimeter violation. "
        + _PATH_LIST_NOTE,
    )
    depends_on: list[str] = Field(
        default_factory=list,
        description="Ids of stories that must be merged into the epic branch before this one starts.",
        json_schema_extra=_schema(items={"type": "string", "pattern": ID_PATTERN}),
    )
    provides: list[str] = Field(
        default_factory=list,
        description="What dependents may rely on: routes, exports, contracts.",
    )
    read_first: list[str] = Field(
        default_factory=list,
        description="Existing paths the coder should read first (an exemplar, a contract to extend).",
    )
    acceptance: list[str] = Field(
        default_factory=list,
        description="Observable 'done when' criteria; the coder plans against them, the judge scores them.",
    )
    tests_change: bool = Field(
        default=False,
        description="The story may delete, skip or rewrite tests.",
    )


class StoryPlan(WireModel):
    """An epic and its stories. Plan order matters: it sets ready, launch and report order."""

    model_config = WireModel.model_config | {"title": "flowd story plan"}

    epic_id: str = Field(
        description="Kebab-case epic id; the epic runs on branch `epic/<epicId>`.",
        json_schema_extra=_schema(pattern=ID_PATTERN),
    )
    epic: str = Field(default="", description="The epic as the operator phrased it.")
    stories: list[Story] = Field(description="The stories, in plan order.")

    def story(self, story_id: str) -> Story | None:
        """The first story with this id (duplicates are a validation error)."""
        return next((s for s in self.stories if s.id == story_id), None)

    def require(self, story_id: str) -> Story:
        found = self.story(story_id)
        if found is None:
            raise KeyError(f"the plan has no story '{story_id}'")
        return found

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.stories]

    @property
    def epic_branch(self) -> str:
        return layout.epic_branch(self.epic_id)

    def story_branch(self, story_id: str) -> str:
        return layout.story_branch(self.epic_id, story_id)
