"""Inside a story, on real repositories with the scripted agent: review rounds, judge revisions,
BLOCKED_ON (genuine and rebutted), and empty tasks (confirmed and not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowd.engine import prompts
from flowd.events.model import Info, StoryJudged, TokensUsed
from tests.engine.scenario import Scenario, coder, git, story


@pytest.fixture(autouse=True)
def script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`times` counts of the scripted agent stay inside the test's temp dir."""
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def verdict(*issues: tuple[str, str]) -> str:
    return json.dumps(
        {"issues": [{"severity": s, "title": t, "description": f"{t}, please"} for s, t in issues]}
    )


def planner(sid: str, *tasks: tuple[str, str]) -> dict[str, Any]:
    plan = {"tasks": [{"title": title, "description": text} for title, text in tasks]}
    return {"when": {"role": "planner", "story": sid}, "reply": json.dumps(plan)}


def infos(sc: Scenario, run_id: str) -> list[str]:
    return [e.event.message for e in sc.events(run_id) if isinstance(e.event, Info)]


def turns(sc: Scenario, run_id: str, role: str) -> int:
    return sum(1 for e in sc.events(run_id) if isinstance(e.event, TokensUsed) and e.event.agent == role)


def findings(sc: Scenario, sid: str) -> str:
    return (sc.repo / f".flow/epics/ep/stories/{sid}.findings.md").read_text(encoding="utf-8")


def checkpoint(sc: Scenario, sid: str) -> str:
    return (sc.repo / f".flow/epics/ep/stories/{sid}.plan.md").read_text(encoding="utf-8")


def test_a_blocking_review_goes_back_to_the_coder_and_is_fixed_in_round_two(tmp_path: Path) -> None:
    rules = [
        {"when": {"role": "reviewer", "story": "s"}, "times": 1, "reply": verdict(("major", "no docstring"))},
        coder(
            "s",
            {"src/a.py": '"""A."""\nx = 2\n'},
            when={"role": "coder", "story": "s", "prompt": "not ready"},
        ),
        coder("s", {"src/a.py": "x = 1\n"}),
    ]
    sc = Scenario.create(
        tmp_path, [story("s", ["src/"])], rules, settings="judgeRounds = 0\nmaxReviewRounds = 2\n"
    )
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    assert git(sc.repo, "show", "epic/ep:src/a.py") == '"""A."""\nx = 2\n'
    assert turns(sc, result.run_id, "reviewer") == 2
    assert turns(sc, result.run_id, "coder") == 2
    assert "## Review of task 1: s" in findings(sc, "s")
    assert "[major] no docstring: no docstring, please" in findings(sc, "s")


def test_a_review_still_blocking_after_the_last_round_fails_the_task_with_the_findings(
    tmp_path: Path,
) -> None:
    rules = [
        {"when": {"role": "reviewer", "story": "s"}, "reply": verdict(("critical", "drops user data"))},
        coder("s", {"src/a.py": "x = 1\n"}),
    ]
    sc = Scenario.create(
        tmp_path, [story("s", ["src/"])], rules, settings="judgeRounds = 0\nmaxReviewRounds = 1\n"
    )
    result = sc.run()
    lane = result.view.lanes["s"]
    assert result.outcome == "failed" and lane.status == "failed"
    assert lane.reason is not None
    assert "task 1 (s) still fails after 1 fix round(s)" in lane.reason
    assert "[critical] drops user data" in lane.reason
    assert turns(sc, result.run_id, "reviewer") == 2
    assert "still blocking" in findings(sc, "s") and "drops user data" in findings(sc, "s")
    assert sc.merge_commits() == []


def test_a_judge_finding_becomes_a_revision_task_that_lands(tmp_path: Path) -> None:
    rules = [
        {"when": {"role": "judge", "story": "s"}, "times": 1, "reply": verdict(("major", "no tests"))},
        coder("s", {"src/test_a.py": "def test_a(): pass\n"}, when={"role": "coder", "task": "^Revision 1"}),
        coder("s", {"src/a.py": "x = 1\n"}),
    ]
    acceptance = {"acceptance": ["a.py defines x", "it is tested"]}
    sc = Scenario.create(tmp_path, [story("s", ["src/"], **acceptance)], rules, settings="judgeRounds = 2\n")
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    judged = [e.event for e in sc.events(result.run_id) if isinstance(e.event, StoryJudged)]
    assert [(j.round, j.clean) for j in judged] == [(1, False), (2, True)]
    assert judged[0].issues[0].title == "no tests"
    assert "## [x] Revision 1: close the judge's findings" in checkpoint(sc, "s")
    assert "- [major] no tests: no tests, please" in checkpoint(sc, "s")
    assert {"src/a.py", "src/test_a.py"} <= set(sc.epic_files())
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    assert report["stories"][0]["note"] == "judge cleared (round 2)"
    assert "Judge round 1 — not cleared" in findings(sc, "s")


def test_a_story_with_an_empty_diff_is_judged_on_its_owned_code(tmp_path: Path) -> None:
    rules = [
        {
            "when": {"role": "judge", "story": "s", "prompt": "owned code as it stands(.|\n)*x = 41"},
            "reply": verdict(),
        },
        {"when": {"role": "judge"}, "reply": verdict(("critical", "judged the wrong thing"))},
    ]
    sc = Scenario.create(
        tmp_path, [story("s", ["src/"])], rules, settings="judgeRounds = 1\n", files={"src/a.py": "x = 41\n"}
    )
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    assert report["stories"][0]["note"] == "verified already in place (round 1)"


def test_the_owned_code_the_judge_reads_follows_no_link_out_of_the_worktree(tmp_path: Path) -> None:
    """flowd, unconfined, reads the owned files for the judge: a link there to a file or folder
    outside the worktree (here committed; an ignored one a lane planted is not committed at all)
    is not read, so what it names never reaches a model's prompt."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET 7731\n", encoding="utf-8")
    rules = [
        {"when": {"role": "judge", "prompt": "TOP-SECRET"}, "reply": verdict(("critical", "read outside"))},
        {
            "when": {"role": "judge", "story": "s", "prompt": "owned code as it stands(.|\n)*x = 41"},
            "reply": verdict(),
        },
        {"when": {"role": "judge"}, "reply": verdict(("critical", "judged the wrong thing"))},
    ]
    sc = Scenario.create(
        tmp_path, [story("s", ["src/"])], rules, settings="judgeRounds = 1\n", files={"src/a.py": "x = 41\n"}
    )
    (sc.repo / "src" / "secret.txt").symlink_to(outside / "secret.txt")
    (sc.repo / "src" / "ext").symlink_to(outside)
    git(sc.repo, "add", "src")
    git(sc.repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "links")
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    assert report["stories"][0]["note"] == "verified already in place (round 1)"


def test_a_genuine_blocked_on_stops_the_story_as_waiting_with_its_need(tmp_path: Path) -> None:
    stories = [story("s", ["src/"]), story("other", ["lib/"])]
    rules = [
        coder("s", reply="The parser is missing.\nBLOCKED_ON: vendor/parser.py (a parser nobody plans)"),
        coder("other", {"lib/b.py": "b = 1\n"}),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    lane = result.view.lanes["s"]
    assert lane.status == "waiting"
    assert lane.reason == "blocked on unplanned work: vendor/parser.py (a parser nobody plans)"
    assert result.view.lanes["other"].status == "done"
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    line = next(s for s in report["stories"] if s["id"] == "s")
    assert line["status"] == "waiting" and "vendor/parser.py" in line["note"]
    assert not any("BLOCKED_ON rejected" in m for m in infos(sc, result.run_id))
    assert sc.merge_commits() == ["ep: merge story other"]


def test_a_blocked_on_a_merged_dependency_is_rebutted_once_and_the_story_goes_on(tmp_path: Path) -> None:
    stories = [story("dep", ["lib/"], provides=["lib.util.helper"]), story("s", ["src/"], ["dep"])]
    rules = [
        coder("dep", {"lib/util.py": "def helper(): ...\n"}),
        coder(
            "s",
            {"src/a.py": "from lib.util import helper\n"},
            when={"role": "coder", "story": "s", "prompt": "checked against the epic's plan and rejected"},
        ),
        coder("s", reply="I need the helper.\nBLOCKED_ON: lib/util.py", times=1),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    rejected = [m for m in infos(sc, result.run_id) if m.startswith("BLOCKED_ON rejected")]
    assert rejected == [
        "BLOCKED_ON rejected — lib/util.py belongs to story 'dep', merged into the epic branch before you "
        "started, so it is already in your working tree. That story provides: lib.util.helper."
    ]
    assert "src/a.py" in sc.epic_files()


def test_a_confirmed_empty_task_is_ticked_without_a_commit(tmp_path: Path) -> None:
    rules = [
        planner("s", ("write a", "Write src/a.py."), ("check a", "Make sure a.py exists.")),
        coder("s", {"src/a.py": "x = 1\n"}, when={"role": "coder", "task": "^write a$"}),
        # No rule for "check a": the scripted coder changes nothing and confirms.
    ]
    sc = Scenario.create(tmp_path, [story("s", ["src/"])], rules)
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    assert "task 2 (check a): already satisfied; ticked without a commit" in infos(sc, result.run_id)
    assert "## [x] write a" in checkpoint(sc, "s") and "## [x] check a" in checkpoint(sc, "s")
    subjects = git(sc.repo, "log", "--format=%s", "story/ep/s").splitlines()
    assert "s: write a" in subjects and "s: check a" not in subjects
    assert turns(sc, result.run_id, "reviewer") == 1  # an empty task is not reviewed


def test_an_unconfirmed_empty_task_fails_the_story(tmp_path: Path) -> None:
    rules = [coder("s", reply="I had a look around; it seems fine.")]
    sc = Scenario.create(tmp_path, [story("s", ["src/"])], rules)
    result = sc.run()
    lane = result.view.lanes["s"]
    assert lane.status == "failed"
    assert lane.reason == (
        "task 1 (s) changed nothing, and the coder did not confirm it was already satisfied"
    )
    assert turns(sc, result.run_id, "coder") == 2  # the task, and the one confirmation asked


def test_a_resumed_task_whose_interrupted_work_stands_is_ticked_when_it_changes_nothing_more(
    tmp_path: Path,
) -> None:
    stories = [story("a", ["a/"]), story("b", ["b/"])]
    first = [
        coder("a", {"a/x.py": "x = 1\n"}),
        coder("b", {"b/y.py": "y = 1\n"}, fail="error", reply="the agent died mid-task"),
    ]
    sc = Scenario.create(tmp_path, stories, first)
    assert sc.run().view.lanes["b"].status == "failed"
    # The rerun finds b's work from the first run (committed as work in progress when b catches up
    # with a), writes the same file again and says nothing about it being satisfied.
    sc.write_script([coder("b", {"b/y.py": "y = 1\n"})])
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["b"].reason
    assert "task 1 (b): changed nothing when resumed; the interrupted run's work for it stands" in infos(
        sc, result.run_id
    )
    assert git(sc.repo, "show", "epic/ep:b/y.py") == "y = 1\n"


def test_every_prompt_template_is_documented() -> None:
    names = [n for n, v in vars(prompts).items() if n.isupper() and isinstance(v, str)]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "prompts.md").read_text(encoding="utf-8")
    assert len(names) >= 18
    assert [n for n in names if f"`{n}`" not in doc] == []
