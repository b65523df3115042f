"""Each real agent program, from its docs/roster.md entry, against the model stub.

`flowd roster check`, a two-story epic to `done` and merged, the trace's tokens against what the
stub served (the ratio is printed per program), `flowd cost`, and no agent process left.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowd.engine.spares import fill
from flowd.events.model import Info, RunEnded, StoryMerged, TokensUsed, ToolUse
from flowd.programs.table import program_of
from flowd.vcs.gitops import Repo
from tests.agents_real.harness import PROGRAMS, Project, entry, match_usage, run_to_end
from tests.model_stub import Delay, ModelStub


@pytest.mark.parametrize("program", PROGRAMS)
def test_roster_check_answers(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    spec = {**entry(program, installed, stub.url, tmp_path / "home"), "roles": ["reviewer", "coder"]}
    project = Project.create(tmp_path, [spec])
    done = project.flowd("roster", "check", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["executors"][0]["reply"] == "ready"
    assert any(e.role == "check" for e in stub.served())


@pytest.mark.parametrize("program", PROGRAMS)
def test_two_story_epic(program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path) -> None:
    epic_billed_in_full(program, installed, stub, tmp_path)


@pytest.mark.parametrize("program", PROGRAMS)
def test_side_requests_finishing_after_the_answer(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    """The agents' own requests (claude's session titles) answered 3 s late, after the turn's
    answer: still every token in the trace, each request in a turn's figures."""
    stub.add_delay(Delay(3.0, role="side"))
    late = epic_billed_in_full(program, installed, stub, tmp_path)
    # claude-agent-acp's titles (one per session) now finish after their sessions' last answers,
    # so some are billed when their sessions end (docs/roster.md "Side requests").
    assert (len(late) > 0) == (program == "claude-agent-acp"), late


def epic_billed_in_full(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> list[TokensUsed]:
    """A two-story epic to the end, its trace's usage against what the stub served; the usage
    billed on its own after the turn that caused it."""
    spec = {**entry(program, installed, stub.url, tmp_path / "home"), "slots": 2}
    project = Project.create(tmp_path, [spec])
    run_id = run_to_end(project, program)
    events = [e.event for e in project.events(run_id)]
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"]
    assert sorted(e.lane for e in events if isinstance(e, StoryMerged)) == ["alpha", "beta"]
    files = project.epic_files()
    assert any(f.startswith("alpha/") for f in files) and any(f.startswith("beta/") for f in files)
    # Tool use carries what the tool was asked to do.
    writes = [e for e in events if isinstance(e, ToolUse)]
    assert writes and all(e.args for e in writes), writes
    # Usage, turn by turn: every turn's figures are the sum of requests the stub served for it.
    matched = match_usage(project.events(run_id), stub.served())
    assert not matched.unmatched_turns, f"{program}: turns matching no set of requests: {matched}"
    hidden = program_of(spec["kind"], spec["command"])
    assert hidden is not None
    # Every request the stub served is in some turn's figures, side requests included.
    assert not matched.unmatched_requests, f"{program}: requests in no turn: {matched.unmatched_requests}"
    # A side request billed on its own (one that finished after its turn's answer) is billed to
    # the lane and role of the turn that caused it.
    late = [event for event, served in matched.turns if all(e.role == "side" for e in served)]
    assert all(e.lane in ("alpha", "beta") and e.executor == program for e in late), late
    assert all(e.clone is not None for e in late if e.agent == "coder"), late
    traced = sum(e.usage.total for e in events if isinstance(e, TokensUsed) and not e.estimated)
    served = sum(e.input + e.output for e in stub.served())
    ratio = traced / served
    print(
        f"\n{program}: {len(matched.turns)} turns match {sum(len(r) for _, r in matched.turns)} requests; "
        f"{len(matched.unmatched_requests)} requests in no turn; {len(late)} billed after their turn; "
        f"traced {traced} / served {served} tokens = {ratio:.3f}"
    )
    assert ratio >= 0.99, f"{program}: the trace holds {ratio:.3f} of the tokens the stub served"
    assert traced == served, f"{program}: traced {traced} of {served} tokens served"
    cost = project.flowd("cost", "--run", run_id)
    assert cost.returncode == 0, cost.stderr
    report = json.loads(project.flowd("cost", "--run", run_id, "--json").stdout)
    named = [(r["executor"], r["program"]) for r in report.get("hiddenRequests", [])]
    assert named == ([] if hidden.hidden is None else [(program, hidden.name)]), named
    assert (hidden.hidden is not None) == ("flowd cannot see" in cost.stdout), cost.stdout
    return late


def test_a_lane_made_ahead_serves_its_story_with_the_agent_it_started(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    """beta depends on alpha: its lane is made while alpha is judged and merged (engine/ahead.py),
    claude-agent-acp started there confined, and beta's story runs in it to `done`, every token
    billed. Spares kept from an earlier run (made here as that run's after-run process makes them)
    are what a lane made ahead takes."""
    program = "claude-agent-acp"
    spec = {**entry(program, installed, stub.url, tmp_path / "home"), "slots": 2}
    project = Project.create(tmp_path, [spec], chain=True)
    assert fill(Repo(project.repo), project.repo.parent / "repo.flowd", 4) == 4
    run_id = run_to_end(project, program)
    events = [e.event for e in project.events(run_id)]
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"]
    said = [e.message for e in events if isinstance(e, Info) and e.lane == "beta"]
    assert any("its worktree is a used one" in m and "(reset)" in m for m in said), said
    matched = match_usage(project.events(run_id), stub.served())
    assert not matched.unmatched_turns and not matched.unmatched_requests, matched
    traced = sum(e.usage.total for e in events if isinstance(e, TokensUsed) and not e.estimated)
    assert traced == sum(e.input + e.output for e in stub.served())
