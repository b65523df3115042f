"""Perimeter-aware planning on real repositories with the scripted planner: a task plan naming
another story's file is planned once more, the task that still names it is dropped, and the
story merges with only its own paths; a resumed story's checkpoint is never planned again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowd.events.model import Envelope, Info, TaskStarted, TokensUsed
from tests.engine.scenario import Scenario, coder, git, story


@pytest.fixture(autouse=True)
def script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`times` counts of the scripted agent stay inside the test's temp dir."""
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


# `conto` builds a feature; `shell` owns App.tsx, where features are registered (the case).
STORIES = [
    story("conto", ["src/features/conto/"]),
    story("shell", ["src/App.tsx"]),
]
OVERVIEW = ("Build the overview", "Write src/features/conto/overview.tsx.\nDepends on: none")
REGISTER = ("Register contoOverviewFeature in App.tsx", "Add the route.\nDepends on: 1")
NOTES = ("Write the notes", "Write src/features/conto/NOTES.md in the form of src/notes.md.\nDepends on: 1")
REPLAN = "Your previous task list named paths outside this story's owned paths"
# The second prompt names the stray task and whose path it is, one line each.
STRAY_LINE = (
    r'- task 2 "Register contoOverviewFeature in App\.tsx" names src/App\.tsx \(story shell owns it\)'
)


def planner(*tasks: tuple[str, str], prompt: str | None = None) -> dict[str, Any]:
    when = {"role": "planner", "story": "conto", **({"prompt": prompt} if prompt else {})}
    return {"when": when, "reply": json.dumps({"tasks": [{"title": t, "description": d} for t, d in tasks]})}


def write(task: str, files: dict[str, str]) -> dict[str, Any]:
    return coder("conto", files, when={"role": "coder", "story": "conto", "task": task})


CODERS = [
    write("overview", {"src/features/conto/overview.tsx": "export const Overview = 1;\n"}),
    write("Register", {"src/App.tsx": "register(contoOverviewFeature);\n"}),
    write("notes", {"src/features/conto/NOTES.md": "notes\n"}),
    coder("shell", {"src/App.tsx": "export const App = 1;\n"}),
]


def infos(events: list[Envelope], lane: str) -> list[str]:
    return [e.event.message for e in events if isinstance(e.event, Info) and e.event.lane == lane]


def planner_turns(events: list[Envelope], lane: str) -> int:
    return sum(
        1
        for e in events
        if isinstance(e.event, TokensUsed) and (e.event.agent, e.event.lane) == ("planner", lane)
    )


def started(events: list[Envelope], lane: str) -> list[str]:
    return [e.event.title for e in events if isinstance(e.event, TaskStarted) and e.event.lane == lane]


def checkpoint(sc: Scenario) -> str:
    return (sc.repo / ".flow/epics/ep/stories/conto.plan.md").read_text(encoding="utf-8")


def test_a_task_naming_another_storys_file_is_planned_again_then_dropped(tmp_path: Path) -> None:
    rules = [
        # The second turn still names App.tsx, and a file nobody owns: one is dropped, one kept.
        planner(OVERVIEW, REGISTER, NOTES, prompt=f"(?s){REPLAN}:\n{STRAY_LINE}\n"),
        planner(OVERVIEW, REGISTER),
        *CODERS,
    ]
    sc = Scenario.create(tmp_path, STORIES, rules)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["conto"].reason
    events = sc.events(result.run_id)

    assert planner_turns(events, "conto") == 2  # exactly one re-plan
    said = infos(events, "conto")
    assert (
        "the task plan names paths outside the story's owned paths, planning once more: "
        "2. Register contoOverviewFeature in App.tsx (src/App.tsx)"
    ) in said
    assert (
        "second task plan: dropped 1 task naming another story's paths: "
        "2. Register contoOverviewFeature in App.tsx (src/App.tsx); "
        "kept 1 task naming paths no story owns: 3. Write the notes (src/notes.md)"
    ) in said
    assert started(events, "conto") == ["Build the overview", "Write the notes"]
    saved = checkpoint(sc)
    assert "Register" not in saved
    assert (
        "## [x] Write the notes\nWrite src/features/conto/NOTES.md in the form of src/notes.md.\nDepends on: 1"
        in saved
    )

    # The story merged with only its own paths; App.tsx on the epic is the shell story's.
    merge = next(
        c for c in git(sc.repo, "log", "--format=%H %s", "epic/ep").splitlines() if "merge story conto" in c
    )
    changed = git(sc.repo, "diff", "--name-only", f"{merge.split()[0]}^1", merge.split()[0]).split()
    assert changed == ["src/features/conto/NOTES.md", "src/features/conto/overview.tsx"]
    assert git(sc.repo, "show", "epic/ep:src/App.tsx") == "export const App = 1;\n"


def test_a_plan_inside_the_story_is_planned_once(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, STORIES, [planner(OVERVIEW, prompt=REPLAN), planner(OVERVIEW), *CODERS])
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["conto"].reason
    events = sc.events(result.run_id)
    assert planner_turns(events, "conto") == 1
    assert not [m for m in infos(events, "conto") if "task plan" in m]


def test_an_all_foreign_replan_is_kept_and_a_resumed_checkpoint_is_not_planned_again(tmp_path: Path) -> None:
    # Both plans are the one stray task: it is kept as it is. Its coder changes nothing, so the
    # story fails with its checkpoint on disk.
    idle = coder("conto", None, reply="Looked at it.")
    sc = Scenario.create(tmp_path, STORIES, [planner(REGISTER), idle, CODERS[-1]])
    first = sc.run()
    assert first.view.lanes["conto"].status == "failed"
    events = sc.events(first.run_id)
    assert planner_turns(events, "conto") == 2
    assert any(
        m.startswith("every task of the second plan names another story's paths")
        for m in infos(events, "conto")
    )
    assert started(events, "conto") == [REGISTER[0]]
    before = checkpoint(sc)

    # Run again with a planner that would stray again: the checkpoint is the plan, so no planner
    # turn; the task runs (its coder now stays inside the story) and the story merges.
    sc.write_script(
        [planner(REGISTER), write("Register", {"src/features/conto/route.tsx": "x\n"}), CODERS[-1]]
    )
    second = sc.run()
    assert second.outcome == "done", second.view.lanes["conto"].reason
    events = sc.events(second.run_id)
    assert planner_turns(events, "conto") == 0
    assert "resuming at task 1 of 1" in infos(events, "conto")
    assert not [m for m in infos(events, "conto") if "task plan" in m]
    assert checkpoint(sc) == before.replace("## [ ]", "## [x]")
    assert "src/features/conto/route.tsx" in sc.epic_files()
