from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story


def test_status_shows_runs_with_lanes_and_a_killed_run_as_interrupted(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    sc = Scenario.create(
        tmp_path, stories, [coder("a", {"a.txt": "a"}), coder("b", {"b.txt": "b"}, delayMs=30000)]
    )
    process = sc.spawn("--run-id", "killed")
    try:
        assert process.stdout is not None
        while b'"TaskStarted"' not in process.stdout.readline():
            pass
    finally:
        kill_group(process)
    proc = subprocess.run([*FLOWD, "status", "--json"], cwd=sc.repo, capture_output=True, text=True)
    assert proc.returncode == 0
    (run,) = json.loads(proc.stdout)["runs"]
    assert run["runId"] == "killed" and run["status"] == "interrupted" and run["epicId"] == "ep"
    assert {lane["lane"] for lane in run["lanes"]} == {"a", "b"}
    assert {"runId", "status", "startedAt", "lanes", "totals"} <= set(run)
    text = subprocess.run([*FLOWD, "status"], cwd=sc.repo, capture_output=True, text=True)
    assert text.returncode == 0 and "Epic ep [interrupted]" in text.stdout


def test_status_of_a_repository_without_runs(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [])
    proc = subprocess.run([*FLOWD, "status"], cwd=sc.repo, capture_output=True, text=True)
    assert proc.returncode == 0 and "No runs yet" in proc.stdout
