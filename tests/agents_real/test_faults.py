"""Faults as designed, with the real agent programs: the model stub answers 429, 401 or never.

- a rate limit on a borrowed turn of a one-executor roster is waited out and the epic finishes;
- a 401 takes the only executor out for the run: exit 3 and one sentence naming it;
- SIGKILL or SIGINT of `flowd run` mid-turn leaves no process it started.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from flowd.events.model import ExecutorExcluded, RunEnded, StoryMerged
from tests.agents_real.harness import PROGRAMS, Project, Running, descendants, entry, wait_gone
from tests.model_stub import Fault, ModelStub


def test_rate_limit_on_a_borrowed_turn_is_waited_out(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    # One slot: the reviewer borrows the story's coder clone, and meets a 429 there.
    spec = {**entry("codex-acp", installed, stub.url, tmp_path / "home"), "slots": 1}
    project = Project.create(tmp_path, [spec])
    stub.add_fault(Fault(status=429, role="reviewer", times=1))
    run = project.spawn()
    try:
        code = run.wait(240)
    finally:
        run.kill()
    assert code == 0, f"exit {code}\n{run.err[-3000:]}"
    events = [e.event for e in project.events(project.run_id(run.out))]
    excluded = [e for e in events if isinstance(e, ExecutorExcluded)]
    assert [e.executor for e in excluded] == ["codex-acp"]
    assert ": rate limited (codex-acp#1: " in excluded[0].reason, excluded[0].reason
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"]
    assert sorted(e.lane for e in events if isinstance(e, StoryMerged)) == ["alpha", "beta"]
    assert [e.fault for e in stub.log if e.fault] == ["429"]


def test_a_401_halts_the_run_naming_the_executor(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    spec = entry("claude-agent-acp", installed, stub.url, tmp_path / "home")
    project = Project.create(tmp_path, [spec])
    stub.add_fault(Fault(status=401, times=0))
    run = project.spawn()
    try:
        code = run.wait(120)
    finally:
        run.kill()
    assert code == 3, f"exit {code}\n{run.err[-3000:]}"
    events = [e.event for e in project.events(project.run_id(run.out))]
    ended = [e for e in events if isinstance(e, RunEnded)]
    assert [e.outcome for e in ended] == ["halted"]
    said = ended[0].reason or ""
    assert "claude-agent-acp is out for this run" in said and "\n" not in said, said
    assert "401" in said or "authentication" in said.lower(), said
    # claude gives up after the retries flowd configures (CLAUDE_CODE_MAX_RETRIES), not minutes.
    assert len([e for e in stub.log if e.fault == "401"]) <= 6


def _mid_turn(project: Project, stub: ModelStub) -> Running:
    """`flowd run` with the stub never answering the coder: the agent is mid-turn."""
    stub.add_fault(Fault(role="coder", hang=True, times=0))
    run = project.spawn()
    code = run.wait(120, until=lambda: any(e.fault == "hang" for e in stub.log))
    assert code is None, f"flowd run ended before the coder's turn: {code}\n{run.err[-3000:]}"
    run.seen |= descendants(run.proc.pid)
    assert run.seen, "no agent process was running"
    return run


@pytest.mark.parametrize("program", PROGRAMS)
def test_sigkill_of_flowd_run_leaves_no_agent(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    project = Project.create(tmp_path, [entry(program, installed, stub.url, tmp_path / "home")])
    run = _mid_turn(project, stub)
    try:
        os.kill(run.proc.pid, signal.SIGKILL)  # flowd only: its agents must follow on their own
        run.proc.wait(30)
        left = wait_gone(run.seen, 15)
    finally:
        run.kill()
    assert not left, f"{program}: processes left after SIGKILL of flowd run: {sorted(left)}"


@pytest.mark.parametrize("program", ["claude-agent-acp", "codex-exec"])
def test_sigint_of_flowd_run_leaves_no_agent(
    program: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    project = Project.create(tmp_path, [entry(program, installed, stub.url, tmp_path / "home")])
    run = _mid_turn(project, stub)
    try:
        os.kill(run.proc.pid, signal.SIGINT)
        code = run.wait(60)
        left = wait_gone(run.seen, 15)
    finally:
        run.kill()
    assert code is not None, f"{program}: flowd run did not stop on SIGINT"
    assert not left, f"{program}: processes left after SIGINT of flowd run: {sorted(left)}"
