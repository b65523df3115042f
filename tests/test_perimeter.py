from __future__ import annotations

import pytest

from flowd.plan.perimeter import (
    classify,
    owner_of_path,
    paths_named_in,
    prune_read_first,
    shared_by,
    stray_tasks,
    task_owns_violations,
)
from flowd.tasks.model import Task, TaskPlan
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


def test_paths_named_in_prose() -> None:
    p = plan(story("app", owned=["src/App.tsx", "src/kit/"]), story("docs", owned=["docs/"]))
    text = "Register X in App.tsx and read src/kit/api.ts, en/it. See https://x/src/a.ts and docs/guide.md."
    assert paths_named_in(p, text) == ["src/App.tsx", "src/kit/api.ts", "docs/guide.md"]


def test_stray_tasks() -> None:
    p = plan(
        story("app", owned=["src/app/", "src/main.py"], sharedReadOnly=["src/lib/util.py"]),
        story("lib", owned=["src/lib/"]),
        story("docs", owned=["docs/"]),
    )
    tasks = TaskPlan(
        story_id="app",
        tasks=[
            Task(title="Edit src/lib/x.py", description="done already", completed=True),
            Task(title="Main", description="Change src/main.py and src/app/a.py, reading src/lib/util.py."),
            Task(title="Folder", description="Work in src/ on src/app/b.py"),
            Task(title="Docs", description="Update docs/app.md and src/lib/y.py"),
            Task(title="Nobody's", description="Touch src/other/z.py"),
        ],
    )
    strays = stray_tasks(p, "app", tasks)
    assert [(s.index, s.paths, s.foreign) for s in strays] == [
        (4, ["docs/app.md", "src/lib/y.py"], True),
        (5, ["src/other/z.py"], False),
    ]


def test_prune_read_first_keeps_safe_anchors_with_tracked_files() -> None:
    p = plan(story("a", readFirst=["src/a/", "src/missing.py", "../x", "README.md"]), story("b"))
    pruned, dropped = prune_read_first(p, ["src/a/x.py", "README.md"])
    assert pruned.stories[0].read_first == ["src/a/", "README.md"]
    assert dropped == [("a", "src/missing.py"), ("a", "../x")]
    same, none = prune_read_first(pruned, ["src/a/x.py", "README.md"])
    assert same is pruned and none == []
