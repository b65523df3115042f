from __future__ import annotations

import pytest

from flowd.perimeter import classify, owner_of_path, shared_by, task_owns_violations
from tests.plan.helpers import plan, story

PLAN = plan(
    story("api", owned=["src/api/"], sharedReadOnly=["src/models.py"]),
    story("ui", owned=["src/ui", "src/models.py"], sharedReadOnly=["src/api/schema.py"]),
    story("db", owned=["db/"], sharedReadOnly=["src/models.py"]),
)


def test_classify_kinds() -> None:
    changed = [
        "src/api/login.py",  # owned: fine
        "./src/api/",  # the owned folder itself
        "src/models.py",  # declared shared read-only (and owned by ui)
        "src/ui/app.tsx",  # another story owns it
        "README.md",  # nobody owns it
        "src/apix/y.py",  # segment-aware: not under src/api
        ".flow/epics/e/stories/api.plan.md",  # flowd's own state
        "README.md",  # duplicates collapse
    ]
    found = [(p.path, p.kind) for p in classify(changed, "api", PLAN)]
    assert found == [
        ("src/models.py", "sharedReadOnly"),
        ("src/ui/app.tsx", "foreignOwned"),
        ("README.md", "outside"),
        ("src/apix/y.py", "outside"),
    ]


def test_classify_for_an_unknown_story_flags_everything() -> None:
    assert [(p.path, p.kind) for p in classify(["db/x.sql", "x"], "ghost", PLAN)] == [
        ("db/x.sql", "foreignOwned"),
        ("x", "outside"),
    ]


def test_owner_and_sharers() -> None:
    assert owner_of_path(PLAN, "src/api/schema.py") == "api"
    assert owner_of_path(PLAN, "src/models.py") == "ui"
    assert owner_of_path(PLAN, "nowhere") is None
    assert shared_by(PLAN, "src/models.py") == ["api", "db"]
    assert shared_by(PLAN, "src/api/schema.py") == ["ui"]
    assert shared_by(PLAN, "src/api/other.py") == []


def test_unsafe_entries_never_cover_anything() -> None:
    p = plan(story("a", owned=["", "/abs"]))
    assert owner_of_path(p, "anything") is None
    assert [k.kind for k in classify(["anything"], "a", p)] == ["outside"]


@pytest.mark.parametrize(
    ("changed", "owns", "expected"),
    [
        (["anything.py"], [], []),
        (["src/session/a.ts", "src/session/b/c.ts"], ["src/session/*"], []),
        (["src/routes/x/y.ts"], ["src/routes/**"], []),
        (["src/a.ts", "src/b.ts", "src/ab/x"], ["src/a.ts", "src/a"], ["src/b.ts", "src/ab/x"]),
        (["./src/b.ts", "src/b.ts", ".flow/x"], ["src/a.ts"], ["src/b.ts"]),
    ],
)
def test_task_owns_violations(changed: list[str], owns: list[str], expected: list[str]) -> None:
    assert task_owns_violations(changed, owns) == expected
