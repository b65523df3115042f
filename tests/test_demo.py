"""`flowd demo` end to end: the sample repository, the scripted epic, the report and the cost."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_the_sample_epic_to_done_and_prints_report_and_cost(tmp_path: Path) -> None:
    target = tmp_path / "calc"
    proc = subprocess.run(
        [sys.executable, "-m", "flowd", "demo", "--dir", str(target)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "# Epic report: calc" in out and out.count("| done |") == 5
    assert "flowd cost" in out and "by executor clone" in out
    assert "Outcome done." in out
    files = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "epic/calc"],
        cwd=target,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in ("calc/core.py", "calc/parser.py", "calc/format.py", "calc/cli.py", "docs/usage.md"):
        assert name in files
    # The docs coder's stray README.md edit was restored, never merged.
    readme = subprocess.run(
        ["git", "show", "epic/calc:README.md"], cwd=target, capture_output=True, text=True
    )
    assert "See docs/usage.md" not in readme.stdout
    # The merged epic's tests pass with the calculator the scripted coders wrote.
    epic = target.parent / "calc.flowd" / "calc" / "_epic"
    cli = subprocess.run(
        [sys.executable, "-m", "calc.cli", "2", "+", "3"], cwd=epic, capture_output=True, text=True
    )
    assert cli.stdout == "2 + 3 = 5\n"


def test_demo_refuses_a_non_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "flowd", "demo", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "is not empty" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "mine"
