"""`kill -USR1` of a running `flowd run` (docs/reliability.md "A run that seems stuck"): every
task's chain of awaits and every thread's stack on its stderr, and the run goes on to its end."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story
from tests.engine.test_pause_run import Event, finish, read_until


def test_sigusr1_prints_the_runs_tasks_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))
    sc = Scenario.create(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"}, delayMs=3000)])
    process = subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path), "--json"], cwd=sc.repo, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    seen: list[Event] = []
    try:
        read_until(process, seen, "TaskStarted")  # the coder's turn is under way (3 s)
        os.kill(process.pid, signal.SIGUSR1)
        assert finish(process, seen) == 0
        assert process.stderr is not None
        err = process.stderr.read().decode()
    finally:
        kill_group(process)
    assert "--- task story a" in err and "flowd/engine/story.py:" in err, err[-3000:]
    assert "Thread 0x" in err  # the threads' stacks too
    assert [e["outcome"] for e in seen if e["type"] == "RunEnded"] == ["done"]
