"""Merge revisions and gate retries end to end (docs/revisions.md): real repositories, the scripted
ACP agent, real gates. The epic gate below tells the epic worktree (`_epic`) from a story's, so a
story is green at home and red on the epic until its revision task adds the missing file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flowd.base.errors import FileProblems
from flowd.control.progress import plain_lines
from flowd.control.shapes import lane_wire
from flowd.events.model import AssistantMessage, GateFlaky, GateResult, MergeRevision
from flowd.trace.view import RunView
from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story, types
from tests.engine.test_run import _wait_for

ON_EPIC = 'test "$(basename "$(pwd)")" != _epic'
NEEDS_FIX = (
    f"sh -c '{ON_EPIC} || test -f a/fixed.txt || {{ echo \"epic check: a/fixed.txt missing\"; exit 1; }}'"
)
NEVER_GREEN = f"sh -c '{ON_EPIC} || {{ echo \"epic check: never green\"; exit 1; }}'"


def flaky_gate(marker: Path, *, only_epic: bool = False) -> str:
    """Red on its first run (where it applies), green ever after: the marker file remembers. It
    lives outside the lane, so the run must let gates write its folder (`gate_state`)."""
    skip = f"{ON_EPIC} && exit 0; " if only_epic else ""
    return f"sh -c '{skip}test -f {marker} && exit 0; touch {marker}; echo flaked; exit 1'"


def gate_state(root: Path) -> Path:
    """A folder confined gates may write (docs/sandbox.md "Widening it"), for the flaky marker."""
    folder = root / "gate-state"
    folder.mkdir(exist_ok=True)
    return folder


def sandbox_allowing(folder: Path) -> str:
    return f"[sandbox]\nallowWrite = [{json.dumps(str(folder))}]\n"


def settings(gate: str, allow: Path | None = None, **more: object) -> str:
    lines = [f"gates = [{json.dumps(gate)}]", "judgeRounds = 0", "maxReviewRounds = 1"]
    top = "\n".join([*lines, *(f"{k} = {json.dumps(v)}" for k, v in more.items())]) + "\n"
    return top + (sandbox_allowing(allow) if allow is not None else "")


def fix_rule(**extra: Any) -> dict[str, Any]:
    """The coder's answer to the merge revision task: its prompt carries the epic gate's output."""
    rule = coder("a", {"a/fixed.txt": "fixed\n"}, **extra)
    rule["when"]["prompt"] = "epic check: a/fixed.txt missing"
    return rule


def report(sc: Scenario) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    return data


def test_a_red_merge_goes_back_for_revision_then_merges(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [fix_rule(), coder("a", {"a/x.txt": "x\n"})],
        settings=settings(NEEDS_FIX),
    )
    result = sc.run()
    assert result.outcome == "done" and result.exit_code == 0
    assert sc.merge_commits() == ["ep: merge story a"]  # the red merge was undone, not kept
    assert {"a/x.txt", "a/fixed.txt"} <= set(sc.epic_files())
    events = sc.events(result.run_id)
    revisions = [e.event for e in events if isinstance(e.event, MergeRevision)]
    assert len(revisions) == 1
    assert (revisions[0].lane, revisions[0].round, revisions[0].gate) == ("a", 1, NEEDS_FIX)
    assert "a/fixed.txt missing" in revisions[0].output
    seen = list(types(events))
    assert seen.count("MergeRolledBack") == 1 and seen.count("StoryMerged") == 1
    assert seen.index("MergeRolledBack") < seen.index("MergeRevision") < seen.index("StoryMerged")
    checkpoint = (sc.repo / ".flow/epics/ep/stories/a.plan.md").read_text(encoding="utf-8")
    assert "Revision 1: make the epic gates green after merging" in checkpoint
    findings = (sc.repo / ".flow/epics/ep/stories/a.findings.md").read_text(encoding="utf-8")
    assert "merge undone; revising (merge revision 1 of 1)" in findings
    lane = result.view.lanes["a"]
    assert lane.merge_revision == 1 and lane_wire(result.view, lane)["mergeRevision"] == 1
    assert report(sc)["stories"][0]["mergeRevisions"] == 1
    markdown = (sc.repo / ".flow/epics/ep/report.md").read_text(encoding="utf-8")
    assert "## Merge revisions\n\n- a: 1 round (epic gates red after merging" in markdown
    lines = [line for e in events for line in plain_lines(result.view, e)]
    assert any(
        line.endswith(f"a: epic gates red after merging; merge revision 1: `{NEEDS_FIX}`") for line in lines
    )


@pytest.mark.parametrize("rounds", [1, 2])
def test_red_forever_fails_after_merge_revision_rounds(tmp_path: Path, rounds: int) -> None:
    # Each revision must change something, or the task loop stops it first: a new line each time.
    revise = coder("a", run=["sh -c 'date +%s%N >> a/x.txt'"])
    revise["when"]["task"] = "Revision"
    rules = [revise, coder("a", {"a/y.txt": "y\n"})]
    sc = Scenario.create(
        tmp_path, [story("a", ["a/"])], rules, settings=settings(NEVER_GREEN, mergeRevisionRounds=rounds)
    )
    result = sc.run()
    assert result.outcome == "failed" and result.exit_code == 1
    plural = "revision" if rounds == 1 else "revisions"
    reason = result.view.lanes["a"].reason or ""
    assert reason.startswith(f"epic gates failed after merging (after {rounds} merge {plural}); merge undone")
    assert "never green" in reason
    events = sc.events(result.run_id)
    assert [e.event.round for e in events if isinstance(e.event, MergeRevision)] == list(range(1, rounds + 1))
    assert list(types(events)).count("MergeRolledBack") == rounds + 1
    assert sc.merge_commits() == [] and "a/y.txt" not in sc.epic_files()
    if rounds == 1:
        # Run again, the failed story gets a fresh allowance: one more revision, then the same failure.
        again = sc.run()
        assert again.outcome == "failed" and again.run_id != result.run_id
        more = [e.event.round for e in sc.events(again.run_id) if isinstance(e.event, MergeRevision)]
        assert more == [1]
        assert (again.view.lanes["a"].reason or "").startswith(
            "epic gates failed after merging (after 1 merge revision)"
        )
        checkpoint = (sc.repo / ".flow/epics/ep/stories/a.plan.md").read_text(encoding="utf-8")
        assert checkpoint.count("make the epic gates green after merging") == 2


def test_merge_revision_rounds_zero_fails_at_the_first_red_merge(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [fix_rule(), coder("a", {"a/x.txt": "x\n"})],
        settings=settings(NEEDS_FIX, mergeRevisionRounds=0),
    )
    result = sc.run()
    assert result.outcome == "failed"
    assert (result.view.lanes["a"].reason or "").startswith("epic gates failed after merging; merge undone:")
    assert "MergeRevision" not in list(types(sc.events(result.run_id)))


@pytest.mark.slow
def test_a_run_killed_mid_revision_resumes_the_revision(tmp_path: Path) -> None:
    # The first answer to the revision task hangs; the run is killed in it. `times` counts per run
    # id, so the resumed run (same id) gets the second, quick answer.
    rules = [fix_rule(times=1, delayMs=60000), fix_rule(), coder("a", {"a/x.txt": "x\n"})]
    sc = Scenario.create(tmp_path, [story("a", ["a/"])], rules, settings=settings(NEEDS_FIX))
    process = sc.spawn("--run-id", "first")
    try:
        _wait_for(process, '"MergeRevision"', timeout=120)
        _wait_for(process, '"TaskStarted"', timeout=60)
    finally:
        kill_group(process)
    again = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--run-id", "first", "--json"],
        cwd=sc.repo,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 0, again.stderr
    lines = [json.loads(line)["event"] for line in again.stdout.splitlines()]
    said = [e["message"] for e in lines if e["type"] == "Info"]
    assert "resuming merge revision 1" in said
    # One round, not two: the checkpoint's revision task was resumed, not added again.
    assert not any(e["type"] == "MergeRevision" for e in lines)
    assert [e for e in lines if e["type"] == "StoryMerged"]
    assert sc.merge_commits() == ["ep: merge story a"] and "a/fixed.txt" in sc.epic_files()
    events = sc.events("first")
    assert [e.event.round for e in events if isinstance(e.event, MergeRevision)] == [1]
    view = RunView(run_id="first")
    for envelope in events:
        view.apply(envelope)
    assert view.lanes["a"].merge_revision == 1 and view.lanes["a"].status == "done"


def test_a_flaky_task_gate_is_rerun_and_not_charged(tmp_path: Path) -> None:
    marker = gate_state(tmp_path) / "flaked-once"
    gate = flaky_gate(marker)
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [coder("a", {"a/x.txt": "x\n"})],
        settings=settings(gate, marker.parent),
    )
    result = sc.run()
    assert result.outcome == "done"
    events = sc.events(result.run_id)
    flaky = [e.event for e in events if isinstance(e.event, GateFlaky)]
    assert [(f.lane, f.where, f.gate, f.attempts) for f in flaky] == [("a", "task", gate, 1)]
    # Not charged: no fix round (the coder was asked once), no revision, no failure.
    assert [e.event.type for e in events if e.event.type == "StageFailed"] == []
    coder_turns = [e for e in events if isinstance(e.event, AssistantMessage) and e.event.agent == "coder"]
    assert len(coder_turns) == 1
    gates = [(e.event.where, e.event.ok) for e in events if isinstance(e.event, GateResult)]
    assert gates == [("task", False), ("task", True), ("epic", True)]
    lane = result.view.lanes["a"]
    assert lane.flaky == 1 and lane_wire(result.view, lane)["flaky"] == 1
    data = report(sc)
    assert data["flakyGates"] == [{"story": "a", "where": "task", "gate": gate, "attempts": 1}]
    assert data["stories"][0]["flakyGates"] == 1
    markdown = (sc.repo / ".flow/epics/ep/report.md").read_text(encoding="utf-8")
    assert "## Flaky gates" in markdown and "- a (task gate): `sh -c" in markdown
    assert "— 1 red run before green" in markdown and "## Merge revisions" not in markdown
    logs = sorted(p.name for p in (sc.repo / ".flow/epics/ep/stories/a/gates").iterdir())
    assert len(logs) == 2 and logs[1].endswith(".rerun1.log")
    assert (sc.repo / ".flow/epics/ep/stories/a/gates" / logs[0]).read_text() == "flaked\n"
    lines = [line for e in events for line in plain_lines(result.view, e)]
    assert any(line.endswith("flaky: green on a rerun after 1 red run (not charged)") for line in lines)


@pytest.mark.parametrize("retries", [0, 1])
def test_a_flaky_epic_gate_with_and_without_retries(tmp_path: Path, retries: int) -> None:
    gate = flaky_gate(gate_state(tmp_path) / "flaked-once", only_epic=True)
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a/"])],
        [coder("a", {"a/x.txt": "x\n"})],
        settings=settings(gate, gate_state(tmp_path), gateRetries=retries, mergeRevisionRounds=0),
    )
    result = sc.run()
    flaky = [e.event for e in sc.events(result.run_id) if isinstance(e.event, GateFlaky)]
    if retries:
        assert result.outcome == "done" and sc.merge_commits() == ["ep: merge story a"]
        assert [(f.where, f.attempts) for f in flaky] == [("epic", 1)]
    else:  # as before gate retries: the first red run fails the merge
        assert result.outcome == "failed" and flaky == []
        assert "flaked" in (result.view.lanes["a"].reason or "")


@pytest.mark.parametrize(("key", "value"), [("gateRetries", -1), ("mergeRevisionRounds", -2)])
def test_negative_settings_are_one_sentence(tmp_path: Path, key: str, value: int) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a/"])], [], settings=settings("true", **{key: value}))
    with pytest.raises(FileProblems) as caught:
        sc.run()
    message = str(caught.value)
    assert "config.toml" in message and key in message and "\n" not in message
    assert not (sc.repo / ".flow/runs").exists()
