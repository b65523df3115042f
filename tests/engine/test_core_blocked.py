"""The plan's answer to a coder's `BLOCKED_ON:` (engine/core/blocked.py), as a table."""

from __future__ import annotations

import pytest

from flowd.engine.core.blocked import rebuttal
from flowd.plan.model import StoryPlan

PLAN = StoryPlan.model_validate(
    {
        "epicId": "ep",
        "stories": [
            {"id": "core", "title": "Core", "owned": ["src/core/"], "provides": ["parse()"]},
            {"id": "api", "title": "API", "owned": ["src/api/"], "dependsOn": ["core"]},
            {"id": "cli", "title": "CLI", "owned": ["src/cli.py"], "dependsOn": ["api"]},
            {"id": "docs", "title": "Docs", "owned": ["docs/"]},
        ],
    }
)


@pytest.mark.parametrize(
    ("need", "expected"),
    [
        (
            "src/api/routes.py",
            "src/api/routes.py is under your own owned paths: building it is this story's work",
        ),
        ("`src/cli.py` first", "src/cli.py belongs to story 'cli', which runs AFTER you: leave it alone"),
        (
            "the parser in src/core/parse.py,",
            "src/core/parse.py belongs to story 'core', merged into the epic branch before you started, "
            "so it is already in your working tree. That story provides: parse().",
        ),
        ("docs/api.md", None),  # an independent story's: the plan does not settle it
        ("a database", None),  # no path at all
    ],
)
def test_rebuttal(need: str, expected: str | None) -> None:
    assert rebuttal(PLAN, "api", need) == expected
