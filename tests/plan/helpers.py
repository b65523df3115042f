"""Small builders for plans in tests: a story is a dict of wire fields."""

from __future__ import annotations

import json
from typing import Any

from flowd.plan.model import StoryPlan


def story(sid: str, owned: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    return {"id": sid, "title": sid.upper(), "owned": [f"src/{sid}"] if owned is None else owned, **fields}


def plan_dict(*stories: dict[str, Any], epic_id: str = "epic") -> dict[str, Any]:
    return {"epicId": epic_id, "epic": "An epic", "stories": list(stories)}


def plan(*stories: dict[str, Any], epic_id: str = "epic") -> StoryPlan:
    return StoryPlan.model_validate(plan_dict(*stories, epic_id=epic_id))


def plan_json(*stories: dict[str, Any]) -> str:
    return json.dumps(plan_dict(*stories), indent=2)
