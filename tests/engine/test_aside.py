"""Parallel tasks inside a story (taskConcurrency > 1), on real repositories with the scripted agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowd.events.model import Info, TaskCompleted, TaskOwnsViolation, TaskStarted
from tests.engine.scenario import Scenario, coder, git, story

PARALLEL = "taskConcurrency = 2\njudgeRounds = 0\nmaxReviewRounds = 1\n"


@pytest.fixture(autouse=True)
def script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def two_tasks(owns: bool = True) -> dict[str, Any]:
    plan = {
        "tasks": [
            {"title": name, "description": f"Write src/{name[0]}.py.\n"
             + (f"Owns: src/{name[0]}.py\n" if owns else "") + "Depends on: none"}
            for name in ("alpha", "beta")
        ]
    }  # fmt: skip
    return {"when": {"role": "planner", "story": "s"}, "reply": json.dumps(plan)}


def task_rule(title: str, writes: dict[str, str], **extra: Any) -> dict[str, Any]:
    return coder("s", writes, when={"role": "coder", "story": "s", "task": f"^{title}$"}, **extra)


def assert_tidy(sc: Scenario) -> None:
    """Task worktrees and task branches are gone once the story is done."""
    assert sorted(p.name for p in (sc.worktree_root / "ep").iterdir()) == ["_epic"]
    assert [b for b in git(sc.repo, "branch", "--format=%(refname:short)").split() if "--task-" in b] == []


def test_two_tasks_run_side_by_side_on_two_clones_and_both_land_on_the_story_branch(tmp_path: Path) -> None:
    rules = [
        two_tasks(),
        # The home task is slow, so the aside task starts (and finishes) while it runs.
        task_rule("alpha", {"src/a.py": "a = 1\n"}, delayMs=800),
        task_rule("beta", {"src/b.py": "b = 1\n"}),
    ]
    sc = Scenario.create(tmp_path, [story("s", ["src/"])], rules, settings=PARALLEL)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    events = [e.event for e in sc.events(result.run_id)]
    started = {e.title: e for e in events if isinstance(e, TaskStarted)}
    assert started["beta"].parallel is True and started["alpha"].parallel is not True
    assert {started["alpha"].executor, started["beta"].executor} == {"demo"}
    assert started["alpha"].clone != started["beta"].clone
    order = [(type(e).__name__, e.title) for e in events if isinstance(e, TaskStarted | TaskCompleted)]
    assert order.index(("TaskStarted", "beta")) < order.index(("TaskCompleted", "alpha"))
    files = git(sc.repo, "ls-tree", "-r", "--name-only", "story/ep/s").split()
    assert {"src/a.py", "src/b.py"} <= set(files)
    log = git(sc.repo, "log", "--format=%s", "story/ep/s").splitlines()
    assert "s: merge task 2 (beta)" in log and "s: alpha" in log
    assert {"src/a.py", "src/b.py"} <= set(sc.epic_files())
    messages = [e.message for e in events if isinstance(e, Info)]
    assert "task 2 (beta) merged from beside the story's coder" in messages
    checkpoint = (sc.repo / ".flow/epics/ep/stories/s.plan.md").read_text(encoding="utf-8")
    assert "## [x] alpha" in checkpoint and "## [x] beta" in checkpoint
    assert_tidy(sc)


def test_a_parallel_task_straying_outside_its_owns_is_flagged_and_sent_back_once(tmp_path: Path) -> None:
    rules = [
        two_tasks(),
        task_rule("alpha", {"src/a.py": "a = 1\n"}, delayMs=800),
        coder(
            "s",
            when={"role": "coder", "task": "^beta$", "prompt": "outside the paths this task owns"},
            deletes=["src/extra.py"],
            reply="put it back",
        ),
        task_rule("beta", {"src/b.py": "b = 1\n", "src/extra.py": "stray = 1\n"}),
    ]
    sc = Scenario.create(tmp_path, [story("s", ["src/"])], rules, settings=PARALLEL)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    events = [e.event for e in sc.events(result.run_id)]
    violations = [e for e in events if isinstance(e, TaskOwnsViolation)]
    assert [(v.lane, v.task, v.paths) for v in violations] == [("s", "beta", ["src/extra.py"])]
    beta = next(e for e in events if isinstance(e, TaskStarted) and e.title == "beta")
    assert beta.parallel is True
    files = sc.epic_files()
    assert "src/b.py" in files and "src/extra.py" not in files
    findings = (sc.repo / ".flow/epics/ep/stories/s.findings.md").read_text(encoding="utf-8")
    assert "## Task 2: beta — owns" in findings and "src/extra.py" in findings
    assert_tidy(sc)


def test_a_task_with_no_free_coder_clone_runs_at_home_after_the_other(tmp_path: Path) -> None:
    rules = [two_tasks(), task_rule("alpha", {"src/a.py": "a = 1\n"}), task_rule("beta", {"src/b.py": "b\n"})]
    sc = Scenario.create(
        tmp_path,
        [story("s", ["src/"])],
        rules,
        settings=PARALLEL,
        executors=[{"id": "solo", "script": "script.json", "slots": 2, "coderSlots": 1}],
    )
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    started = [e.event for e in sc.events(result.run_id) if isinstance(e.event, TaskStarted)]
    assert [(s.title, s.parallel, s.clone) for s in started] == [("alpha", False, 1), ("beta", False, 1)]
    assert {"src/a.py", "src/b.py"} <= set(sc.epic_files())
    assert_tidy(sc)


def test_a_merge_back_conflict_reruns_the_task_at_home(tmp_path: Path) -> None:
    # Both tasks write the same file (a planner's mistake): the aside one conflicts on merge-back,
    # and the story's coder redoes it on top of the home task's commit.
    rules = [
        two_tasks(owns=False),
        task_rule("alpha", {"src/a.py": "a = 1\n"}, delayMs=800),
        task_rule("beta", {"src/a.py": "a = 2\n", "src/b.py": "b\n"}, times=1),
        task_rule("beta", {"src/b.py": "b = 2\n"}),
    ]
    sc = Scenario.create(tmp_path, [story("s", ["src/"])], rules, settings=PARALLEL)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    events = [e.event for e in sc.events(result.run_id)]
    beta = [(e.parallel, e.clone) for e in events if isinstance(e, TaskStarted) and e.title == "beta"]
    assert beta[0][0] is True and beta[1] == (False, 1)
    messages = [e.message for e in events if isinstance(e, Info)]
    assert any(m.startswith("task 2 conflicted merging back (src/a.py)") for m in messages)
    assert git(sc.repo, "show", "epic/ep:src/a.py") == "a = 1\n"
    assert git(sc.repo, "show", "epic/ep:src/b.py") == "b = 2\n"
    assert_tidy(sc)
