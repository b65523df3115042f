"""A dependent's lane made ahead while its dependency is in the merge train (engine/ahead.py), on
real repositories with the scripted agent: its worktree is at its place before the dependency
lands and the story resets it there; one whose story never starts is given back at the run's end."""

from __future__ import annotations

import json
from pathlib import Path

from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, story

# The epic's gates (in the merge train's candidate worktrees) take a second; a lane's are instant.
SLOW_EPIC = 'case "$PWD" in */_train/*) sleep 1;; esac'


def _scenario(tmp_path: Path, epic_gate: str, extra: str = "") -> Scenario:
    # `c` and `d` merge first and leave two spares (a lane made ahead leaves one for a lane that
    # starts meanwhile); `a` finishes its task after them; `b` depends on `a`.
    stories = [
        story("c", ["c.txt"]),
        story("d", ["d.txt"]),
        story("a", ["a.txt"]),
        story("b", ["b.txt"], ["a"]),
    ]
    rules = [
        coder("c", {"c.txt": "c\n"}),
        coder("d", {"d.txt": "d\n"}),
        {**coder("a", {"a.txt": "a\n"}), "delayMs": 4000},
        coder("b", {"b.txt": "b\n"}),
    ]
    settings = (
        f"gates = [{json.dumps(epic_gate)}]\nconcurrency = 4\njudgeRounds = 0\nmaxReviewRounds = 1\n{extra}"
    )
    return Scenario.create(tmp_path, stories, rules, settings=settings)


def _said(sc: Scenario, run_id: str, lane: str) -> list[str]:
    return [
        e.event.message
        for e in sc.events(run_id)
        if type(e.event).__name__ == "Info" and getattr(e.event, "lane", None) == lane
    ]


def test_a_dependents_worktree_is_made_while_its_dependency_is_gated(tmp_path: Path) -> None:
    sc = _scenario(tmp_path, SLOW_EPIC)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    events = sc.events(result.run_id)
    slow = [e.event for e in events if type(e.event).__name__ == "GateResult" and e.event.where == "epic"]
    assert slow and all(g.duration_ms >= 900 for g in slow), slow
    # b's worktree was at its place when b started: reset there, not a spare moved in nor added.
    said = _said(sc, result.run_id, "b")
    assert any("its worktree is a used one" in m and "(reset)" in m for m in said), said
    order = [
        (type(e.event).__name__, getattr(e.event, "lane", None) or getattr(e.event, "story", None))
        for e in events
    ]
    assert order.index(("StoryMerged", "a")) < order.index(("StoryStatusChanged", "b"))
    assert sorted(sc.merge_commits()) == [f"ep: merge story {s}" for s in "abcd"]
    assert git(sc.repo, "ls-tree", "-r", "--name-only", "story/ep/b").split().count("a.txt") == 1
    assert sc.lanes_left() == ["_epic"]


def test_a_lane_made_ahead_whose_story_never_starts_is_given_back(tmp_path: Path) -> None:
    # a's merge is red (its file fails the epic gate) and it has no revision round: it fails, and
    # b, whose lane was made while a was gated, never starts.
    # The gate's output (in a's failure) lists the epic's lanes after its second: b's is there.
    lanes_dir = tmp_path / "repo.flowd" / "ep"
    red_for_a = f'case "$PWD" in */_train/*) sleep 1; ls -1 {lanes_dir}; test ! -e a.txt;; esac'
    sc = _scenario(tmp_path, red_for_a, "gateRetries = 0\nmergeRevisionRounds = 0\n")
    result = sc.run()
    lanes = result.view.lanes
    assert (lanes["a"].status, lanes["c"].status, lanes["d"].status) == ("failed", "done", "done"), {
        k: v.reason for k, v in lanes.items()
    }
    assert "b" in (lanes["a"].reason or "").splitlines(), lanes["a"].reason
    assert lanes["b"].status == "waiting"
    assert not (sc.worktree_root / "ep" / "b").exists()
    assert git(sc.repo, "branch", "--list", "story/ep/b") == ""
    assert "b" not in [w.path.name for w in Repo(sc.repo).worktrees()]
