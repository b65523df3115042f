"""Bad input with the real agent programs: each is one sentence naming the executor and the fix,
and nothing is lost.

- a program older than flowd runs (`flowd roster check`, and `flowd run` halts with exit 3);
- a model the agent rejects;
- a model endpoint that answers garbage (an HTML page, SSE that is not JSON, a stream cut short):
  the executor is "not answering" and a run moves its work to another executor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flowd.events.model import ExecutorExcluded, ExecutorHandedOver, RunEnded, StoryMerged
from tests.agents_real.harness import Project, entry, git
from tests.model_stub import Fault, ModelStub

FIX = "the model endpoint's answer is not its API; check the agent's base URL and any proxy in between ("


def _check(project: Project) -> dict[str, Any]:
    done = project.flowd("roster", "check", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout)["executors"][0]
    assert not result["ok"]
    return result


def _old_claude(installed: dict[str, Path], url: str, home: Path, bin_dir: Path) -> dict[str, Any]:
    """docs/roster.md's `claude -p` entry run through a `claude` that says it is 2.0.0."""
    spec = entry("claude-p", installed, url, home)
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "claude"
    wrapper.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "2.0.0 (Claude Code)"; exit 0; fi\n'
        f'exec "{spec["command"][0]}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return {**spec, "command": [str(wrapper), *spec["command"][1:]]}


def test_a_program_too_old_is_refused_naming_the_executor_and_the_fix(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    spec = _old_claude(installed, stub.url, tmp_path / "home", tmp_path / "bin")
    project = Project.create(tmp_path, [spec])
    said = (
        "claude-p#1: claude -p 2.0.0 is older than 2.1.332, the oldest flowd runs; install a newer one "
        "(npm install -g @anthropic-ai/claude-code@2.1.332 or later)"
    )
    assert _check(project)["failure"] == {"kind": "auth", "message": said}
    before = (
        git(project.repo, "rev-parse", "HEAD"),
        git(project.repo, "status", "--porcelain", "--", ".", ":!.flow"),
    )
    run = project.flowd("run", str(project.plan), "--json", timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    ended = [e.event for e in project.events(project.run_id(run.stdout)) if isinstance(e.event, RunEnded)]
    reason = ended[0].reason or ""
    assert ended[0].outcome == "halted" and "\n" not in reason, reason
    assert "claude-p is out for this run" in reason and said in reason, reason
    assert stub.served() == []  # no model request was made
    assert (
        git(project.repo, "rev-parse", "HEAD"),
        git(project.repo, "status", "--porcelain", "--", ".", ":!.flow"),
    ) == before


def test_a_model_the_agent_rejects_is_one_sentence(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    spec = {**entry("codex-acp", installed, stub.url, tmp_path / "home"), "model": "gpt-nope"}
    failure = _check(Project.create(tmp_path, [spec]))["failure"]
    assert failure["kind"] == "auth", failure
    message = failure["message"]
    assert message.startswith("codex-acp#1: the agent rejected model 'gpt-nope' ("), message
    assert "; set the roster's `model` to one it offers: " in message and "\n" not in message, message


@pytest.mark.parametrize(
    ("program", "garbage"), [("codex-exec", "html"), ("claude-agent-acp", "json"), ("gemini", "truncated")]
)
def test_garbage_from_the_model_is_not_answering_and_says_what_to_check(
    program: str, garbage: str, installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    stub.add_fault(Fault(garbage=garbage, times=0))
    spec = {**entry(program, installed, stub.url, tmp_path / "home"), "roles": ["reviewer"]}
    failure = _check(Project.create(tmp_path, [spec]))["failure"]
    assert failure["kind"] == "unavailable", failure
    assert failure["message"].startswith(f"{program}#1: {FIX}"), failure["message"]


def test_a_run_moves_work_off_an_executor_whose_endpoint_answers_garbage(
    installed: dict[str, Path], stub: ModelStub, tmp_path: Path
) -> None:
    # codex speaks the Responses API, claude the Messages API: only codex meets the garbage.
    stub.add_fault(Fault(garbage="json", api="responses", times=0))
    codex = entry("codex-exec", installed, stub.url, tmp_path / "home")
    claude = entry("claude-p", installed, stub.url, tmp_path / "home")
    project = Project.create(tmp_path, [codex, {**claude, "slots": 2}])
    run = project.spawn()
    try:
        code = run.wait(240)
    finally:
        run.kill()
    assert code == 0, f"exit {code}\n{run.err[-3000:]}"
    events = [e.event for e in project.events(project.run_id(run.out))]
    excluded = [e for e in events if isinstance(e, ExecutorExcluded)]
    assert excluded and {e.executor for e in excluded} == {"codex-exec"}, excluded
    assert all(FIX in e.reason and "\n" not in e.reason for e in excluded), excluded
    assert any(isinstance(e, ExecutorHandedOver) and e.to.startswith("claude-p") for e in events)
    assert [e.outcome for e in events if isinstance(e, RunEnded)] == ["done"]
    assert sorted(e.lane for e in events if isinstance(e, StoryMerged)) == ["alpha", "beta"]
