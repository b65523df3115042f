"""View checkpoints end to end: a real `flowd run` checkpoints its view, is killed, resumes the same
run (the seq goes on), and `flowd status` and the report read the same from a checkpoint as from
the whole trace (docs/trace.md, "View checkpoint")."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from flowd.cost.prices import pricer
from flowd.store.config import load_settings
from flowd.trace.checkpoint import ENV_BYTES, checkpoint_path
from flowd.trace.log import TraceFollower, fold_trace, read_trace, trace_path
from flowd.trace.view import RunView
from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story

RUN = "first"
STORIES = [
    story("base", ["src/base.py"]),
    story("left", ["src/left.py"], ["base"]),
    story("right", ["src/right.py"], ["base"]),
    story("top", ["src/top.py"], ["left", "right"]),
]
# A checkpoint after every line: every point the runner can be killed at has one just before it.
ENV = {**os.environ, ENV_BYTES: "1"}


def status(repo: Path) -> dict[str, Any]:
    proc = subprocess.run([*FLOWD, "status", "--json"], cwd=repo, capture_output=True, text=True, env=ENV)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def status_without_checkpoint(repo: Path) -> dict[str, Any]:
    ckpt = checkpoint_path(trace_path(repo, RUN))
    aside = ckpt.with_name("aside.json")
    ckpt.rename(aside)
    try:
        return status(repo)
    finally:
        aside.rename(ckpt)


def restored_offset(repo: Path) -> int:
    follower = TraceFollower(trace_path(repo, RUN))
    follower.restore(RunView(run_id=RUN, pricer=pricer(load_settings(repo))))
    return follower.offset


def wait_for(process: subprocess.Popen[bytes], text: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if text.encode() in line:
            return
    raise AssertionError(f"the run ended before {text}")


def test_a_killed_then_resumed_run_reads_the_same_from_its_checkpoints(tmp_path: Path) -> None:
    rules = [coder(s["id"], {s["owned"][0]: f"# {s['id']}\n"}, delayMs=300) for s in STORIES]
    sc = Scenario.create(tmp_path, STORIES, rules)
    process = subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path), "--json", "--run-id", RUN],
        cwd=sc.repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=ENV,
    )
    try:
        wait_for(process, '"StoryMerged"')
    finally:
        kill_group(process)
    trace = trace_path(sc.repo, RUN)
    assert 0 < restored_offset(sc.repo) <= trace.stat().st_size
    killed = status(sc.repo)
    assert killed["runs"][0]["status"] == "interrupted"
    assert killed == status_without_checkpoint(sc.repo)

    again = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--json", "--run-id", RUN],
        cwd=sc.repo,
        capture_output=True,
        timeout=180,
        env=ENV,
    )
    assert again.returncode == 0, again.stderr.decode()
    seqs = [e.seq for e in read_trace(trace)]  # (a line the kill tore is not read)
    assert seqs == list(range(1, len(seqs) + 1))  # the resumed run went on counting
    assert restored_offset(sc.repo) == trace.stat().st_size  # the checkpoint at close covers it all
    done = status(sc.repo)
    assert done["runs"][0]["status"] == "done"
    assert done == status_without_checkpoint(sc.repo)

    # The report was built from the resumed runner's view, which started from a checkpoint.
    report = json.loads((sc.repo / ".flow" / "epics" / "ep" / "report.json").read_text())
    ckpt = checkpoint_path(trace)
    ckpt.unlink()
    full = fold_trace(trace, RunView(run_id=RUN, pricer=pricer(load_settings(sc.repo))))
    assert report["tokens"] == full.totals.tokens > 0
