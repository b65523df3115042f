"""Each real agent program, confined (docs/sandbox.md), running a shell command through its own
shell tool that writes its owned file and then tries the user's checkout: the write past the
lane is refused by the kernel, the refusal is named in the trace and the story's findings, and
the story still finishes and merges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowd.events.model import LaneEscape, RunEnded, StoryMerged
from flowd.sandbox import landlock
from tests.agents_real.harness import PROGRAMS, Project, entry, run_to_end
from tests.model_stub import ModelStub

# gemini (0.61) sends its shell tool's output to the model only: its ACP updates carry none
# (docs/sandbox.md "Refusals"), so the refusal is the kernel's, unnamed. If a release starts
# sending it, this test fails and the program leaves this set.
UNSEEN = {"gemini"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_the_agents_own_shell_cannot_write_past_its_lane(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    project = Project.create(tmp_path, [entry(program, installed, stub.url, tmp_path / "home")])
    target = project.repo / "ESCAPED.txt"
    plan = json.loads(project.plan.read_text(encoding="utf-8"))
    plan["stories"] = plan["stories"][:1]
    plan["stories"][0]["description"] += f" ESCAPE-PROBE {target}"  # tests/model_stub/brain.py
    project.plan.write_text(json.dumps(plan), encoding="utf-8")
    run_id = run_to_end(project, program)
    assert not target.exists(), f"{program}: the write past the lane landed"
    events = [e.event for e in project.events(run_id)]
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"]
    assert [e.lane for e in events if isinstance(e, StoryMerged)] == ["alpha"]
    assert any(f.startswith("alpha/") for f in project.epic_files())
    # Named, as the kernel's refusal; what else the shell was refused on this machine (a login
    # shell's rc files writing to $HOME) is named too, never blamed on anything but this lane.
    escapes = [(e.lane, e.path, e.what, e.action) for e in events if isinstance(e, LaneEscape)]
    assert all(e[0] == "alpha" and e[3] == "denied" for e in escapes), escapes
    if program in UNSEEN:
        assert ("alpha", str(target), "checkout", "denied") not in escapes  # see UNSEEN
        return
    assert ("alpha", str(target), "checkout", "denied") in escapes, f"{program}: {escapes}"
    findings = project.repo / ".flow" / "epics" / "ep" / "stories" / "alpha.findings.md"
    assert f"`{target}` (checkout)" in findings.read_text(encoding="utf-8"), program
