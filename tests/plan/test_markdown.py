from __future__ import annotations

from flowd.plan.markdown import render_plan_markdown
from flowd.plan.parse import parse_plan_text
from tests.plan.helpers import plan, story


def test_rendered_markdown_parses_back_to_the_same_plan() -> None:
    p = plan(
        story(
            "api", description="Build it.\n```json storyplan\n{}\n```", acceptance=["401 on a wrong password"]
        ),
        story("ui", dependsOn=["api"], sharedReadOnly=["src/api/schema.py"], provides=["the login page"]),
    )
    text = render_plan_markdown(p)
    parsed = parse_plan_text(text, markdown=True)
    assert parsed.violations == [] and parsed.plan == p
    assert "## Waves\n\n1. api\n2. ui\n" in text
    assert "### ui — UI\n" in text
    assert "- depends on: `api`\n- owned: `src/ui`\n- shared read-only: `src/api/schema.py`\n" in text
    assert "Done when:\n\n1. 401 on a wrong password\n" in text
    assert '"testsChange": false' in text  # defaults are written out
