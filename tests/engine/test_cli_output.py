"""`flowd run` and `flowd status` as a user sees them: piped (a CI log) and on a terminal (a pty)."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.engine.scenario import FLOWD, Scenario, coder, kill_group, story

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_ID = "a-story-whose-id-alone-is-longer-than-eighty-columns-so-a-wrapping-view-would-split-its-row"


def _scenario(tmp_path: Path) -> Scenario:
    stories = [story("a", ["a.txt"]), story(LONG_ID, ["b.txt"], ["a"])]
    rules = [coder("a", {"a.txt": "a\n"}), coder(LONG_ID, {"b.txt": "b\n"})]
    return Scenario.create(tmp_path, stories, rules)


def run_in_pty(args: list[str], cwd: Path, timeout_s: float = 120) -> tuple[int, str]:
    """Run a command with a pseudo-terminal as stdin, stdout and stderr; its exit code and output."""
    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        args, cwd=cwd, stdin=child, stdout=child, stderr=child, env=env, start_new_session=True
    )
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    data = os.read(main, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
        os.close(main)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def test_piped_run_prints_its_id_first_then_one_plain_line_per_change(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    proc = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    match = re.fullmatch(r"run (ep-\S+)", lines[0])
    assert match, lines[0]
    run_id = match.group(1)
    assert (sc.repo / ".flow" / "runs" / run_id / "trace.jsonl").exists()
    # No cursor movement, no colour, no carriage return; the last line ends its line.
    assert "\x1b" not in out and "\r" not in out
    assert out.endswith("\n")
    stamped = lines[1:-1]
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in stamped), stamped
    body = [line[9:] for line in stamped]
    assert body[0] == "epic ep: 2 stories, concurrency 3, on epic/ep"
    assert "a: active" in body and "a: task 1/1 started: a (demo#1)" in body
    assert body.index("a: active") < body.index("a: task 1/1 completed: a")
    assert any(line.startswith("a: merged into epic/ep at ") for line in body)
    # A row longer than 80 columns stays one line.
    assert f"{LONG_ID}: active" in body
    assert body[-1].startswith("epic ep done: 2 done, 0 failed, 0 not finished · ")
    assert lines[-1] == f"done: report at {sc.repo / '.flow' / 'epics' / 'ep' / 'report.md'}"

    status = subprocess.run([*FLOWD, "status"], cwd=sc.repo, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and "\x1b" not in status.stdout
    rows = status.stdout.splitlines()
    assert rows[0].startswith(f"{run_id}  started ")
    assert rows[1].startswith("Epic ep [done] 2/2 stories · 0 lanes · ")
    (row,) = [r for r in rows if r.startswith(LONG_ID)]
    assert row.split()[1] == "done"  # the id, its status and figures on one line: no wrapping


@pytest.mark.slow
def test_run_on_a_terminal_shows_its_id_first_and_a_live_table(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    code, out = run_in_pty([*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo)
    assert code == 0, out
    text = ANSI.sub("", out).replace("\r", "")
    first = next(line for line in text.splitlines() if line.strip())
    assert re.fullmatch(r"run ep-\S+", first.strip()), first
    assert "\x1b[" in out  # the live table redraws in place
    assert "Epic ep [done] 2/2 stories" in text
    assert text.rstrip("\n").splitlines()[-1].startswith("done: report at ")

    code, status = run_in_pty([*FLOWD, "status"], cwd=sc.repo)
    assert code == 0 and "Epic ep [done]" in ANSI.sub("", status)


def test_rerunning_a_finished_epic_adds_no_run(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    first = subprocess.run([*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.splitlines()[0].split()[1]
    again = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == f"run {run_id}"
    assert again.stdout.splitlines()[1].startswith("nothing to run: every story of epic ep is merged")
    assert [p.name for p in (sc.repo / ".flow" / "runs").iterdir()] == [run_id]
    status = subprocess.run([*FLOWD, "status", "--json"], cwd=sc.repo, capture_output=True, text=True)
    assert [r["runId"] for r in json.loads(status.stdout)["runs"]] == [run_id]
    # With --json stdout stays free of prose: no events happened, the sentence is on stderr.
    quiet = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--json"], cwd=sc.repo, capture_output=True, text=True
    )
    assert quiet.returncode == 0 and quiet.stdout == "" and "nothing to run" in quiet.stderr


def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path: Path) -> None:
    sc = _scenario(tmp_path)
    # `flowd run PLAN | head -1`: the pipe closes after the first line.
    proc = subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path)],
        cwd=sc.repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline().decode()
        proc.stdout.close()
        assert proc.wait(timeout=180) == 0
        assert first.startswith("run ep-")
        assert b"Traceback" not in proc.stderr.read()
    finally:
        kill_group(proc)
    run_id = first.split()[1].strip()
    assert [e.event.type for e in sc.events(run_id)][-1] == "RunEnded"
    assert sorted(sc.epic_files()) == ["README.md", "a.txt", "b.txt"]
