"""Each real agent program, confined, committing with git itself through its own shell tool
(docs/sandbox.md "The quarantine"): its objects go to its lane's own store, never the shared one;
flowd takes them in, checked, and the story merges with the agent's commit; the repository passes
`git fsck --full` and no object is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowd.events.model import LaneEscape, RunEnded, StoryMerged
from flowd.sandbox import landlock
from tests.agents_real.harness import PROGRAMS, Project, entry, git, run_to_end
from tests.model_stub import ModelStub
from tests.model_stub.brain import AGENT_COMMIT, COMMIT_PROBE


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_agents_own_commit_goes_through_the_quarantine(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    project = Project.create(tmp_path, [entry(program, installed, stub.url, tmp_path / "home")])
    plan = json.loads(project.plan.read_text(encoding="utf-8"))
    plan["stories"] = plan["stories"][:1]
    plan["stories"][0]["description"] += f" {COMMIT_PROBE}"  # tests/model_stub/brain.py
    project.plan.write_text(json.dumps(plan), encoding="utf-8")
    objects = project.repo / ".git" / "objects"
    before = {p for p in objects.rglob("*") if p.is_file()}
    run_id = run_to_end(project, program)
    events = [e.event for e in project.events(run_id)]
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"], program
    assert [e.lane for e in events if isinstance(e, StoryMerged)] == ["alpha"], program
    assert [e for e in events if isinstance(e, LaneEscape) and e.what == "gitObjects"] == []
    # The agent's commit itself, by its own author, is on the epic branch.
    log = git(project.repo, "log", "--format=%an %s", "epic/ep")
    assert f"agent {AGENT_COMMIT}" in log.splitlines(), f"{program}: {log}"
    git(project.repo, "fsck", "--full", "--no-dangling")
    # Nothing that was in the shared store is gone (what flowd took in was added beside it).
    assert before <= {p for p in objects.rglob("*") if p.is_file()}
