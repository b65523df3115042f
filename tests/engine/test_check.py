from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.engine.scenario import FLOWD, Scenario, coder, story


def test_check_lists_violations_in_live_worktrees_and_exits_1(tmp_path: Path) -> None:
    # The story's gate stays red, so it fails with its worktree (and its stray file) kept.
    rules = [coder("api", {"src/api.py": "x\n", "stray.txt": "oops\n", "red": "1"})]
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/api.py", "red"])],
        rules,
        settings='gates = ["test ! -e red"]\nmaxReviewRounds = 0\njudgeRounds = 0\n',
    )
    assert sc.run().outcome == "failed"
    proc = subprocess.run([*FLOWD, "check", "--json"], cwd=sc.repo, capture_output=True, text=True)
    assert proc.returncode == 1
    found = json.loads(proc.stdout)["violations"]
    assert [(v["story"], v["path"], v["kind"]) for v in found] == [("api", "stray.txt", "outside")]
    text = subprocess.run([*FLOWD, "check"], cwd=sc.repo, capture_output=True, text=True)
    assert text.returncode == 1 and "stray.txt: outside (story api of ep)" in text.stdout


def test_check_is_quiet_and_exits_0_when_every_story_is_inside(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a"})])
    assert sc.run().outcome == "done"
    proc = subprocess.run([*FLOWD, "check", "--json"], cwd=sc.repo, capture_output=True, text=True)
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"violations": []}
