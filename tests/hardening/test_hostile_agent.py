"""An agent that reaches outside its story: writes beyond its worktree, deletes the repository's
files, runs `rm -rf`. What flowd prevents, what it repairs, and what it can only detect.

ACP's file system is not a sandbox: flowd refuses permission for writes and deletes that resolve
outside the working directory, but a shell command the agent runs itself can touch anything the
user can. That limit is pinned here too, so docs/reliability.md states only what is true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowd.events.model import AssistantMessage, LaneEscape, PerimeterViolation
from tests.engine.scenario import Scenario, coder, git, story

FILES = {"lib/core.py": "CORE = 1\n", "docs/guide.md": "# guide\n"}
DETECT = 'judgeRounds = 0\nmaxReviewRounds = 1\n[sandbox]\nmode = "detect"\n'


@pytest.fixture(autouse=True)
def _script_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))


def test_writes_outside_the_worktree_are_refused_and_deletions_are_restored(tmp_path: Path) -> None:
    user = tmp_path / "repo"
    stories = [
        story("escape", ["src/escape/"]),
        story("wrecker", ["src/wreck/"]),
        story("libs", ["lib/"], sharedReadOnly=["docs/guide.md"]),
    ]
    rules = [
        coder(
            "escape",
            {
                "src/escape/ok.py": "OK = 1\n",
                "../../../repo/evil.txt": "relative escape into the user's checkout\n",
                str(user / "evil-abs.txt"): "absolute escape into the user's checkout\n",
                "../_epic/evil-epic.txt": "escape into the epic worktree\n",
            },
            deletes=["../../../repo/README.md", "../_epic/README.md"],
        ),
        coder(
            "wrecker",
            {"src/wreck/w.py": "W = 1\n"},
            deletes=["README.md", "lib/core.py"],
            run=["rm -rf docs"],
        ),
        coder("libs", {"lib/extra.py": "EXTRA = 1\n"}),
    ]
    sc = Scenario.create(tmp_path, stories, rules, files=FILES)
    epic_wt = sc.worktree_root / "ep" / "_epic"
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    # Nothing reached the user's checkout or the epic worktree.
    assert not (user / "evil.txt").exists() and not (user / "evil-abs.txt").exists()
    assert (user / "README.md").read_text(encoding="utf-8") == "# sample\n"
    assert not (epic_wt / "evil-epic.txt").exists()
    assert git(user, "status", "--porcelain").split() == ["??", "ep.epic.json"]
    messages = " ".join(m.text for m in _of(sc, result.run_id, AssistantMessage))
    assert "permission refused: Write ../../../repo/evil.txt" in messages
    # The wrecker's deletions were flagged, sent back, then restored from the epic branch.
    violations = [v for v in _of(sc, result.run_id, PerimeterViolation) if v.lane == "wrecker"]
    assert violations[0].action == "flagged" and violations[-1].action == "restored"
    assert {p.path: p.kind for p in violations[-1].paths} == {
        "README.md": "outside",
        "docs/guide.md": "outside",
        "lib/core.py": "foreignOwned",
    }
    files = set(sc.epic_files())
    assert {"README.md", "lib/core.py", "docs/guide.md", "lib/extra.py", "src/wreck/w.py"} <= files
    assert git(sc.repo, "show", "epic/ep:lib/core.py") == "CORE = 1\n"


def test_a_shell_command_that_writes_past_its_lane_is_caught_and_its_story_fails(tmp_path: Path) -> None:
    """A command is the agent's own process: without OS confinement it can write anywhere the user
    can. Detection (docs/sandbox-detection.md) finds it when the turn ends: the file written into
    the epic worktree is put back, the one in the user's checkout is reported (it may be the
    user's own edit, so it is left), and the story that did it fails naming the path."""
    rules = [
        coder(
            "sneaky",
            {"src/s.py": "S = 1\n"},
            run=["echo pwned > ../_epic/pwned.txt", "echo pwned > ../../../repo/pwned.txt"],
        )
    ]
    sc = Scenario.create(tmp_path, [story("sneaky", ["src/"])], rules, settings=DETECT)
    result = sc.run()
    assert result.outcome == "failed" and result.exit_code == 1
    reason = result.view.lanes["sneaky"].reason or ""
    # It names the escape found first: the checkout's scan runs beside the epic worktree's check.
    named = [
        f"it changed {path} ("
        for path in (sc.repo / "pwned.txt", sc.worktree_root / "ep" / "_epic" / "pwned.txt")
    ]
    assert reason.startswith("story 'sneaky' wrote past its lane: ") and any(n in reason for n in named)
    escapes = {(e.path, e.what, e.action) for e in _of(sc, result.run_id, LaneEscape)}
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert escapes == {
        (str(sc.repo / "pwned.txt"), "checkout", "reported"),
        (str(epic_wt / "pwned.txt"), "otherLane", "undone"),
    }
    assert sc.merge_commits() == [] and not (epic_wt / "pwned.txt").exists()
    # Reported, never touched: the file is in the user's checkout, untracked, never committed by flowd.
    assert (sc.repo / "pwned.txt").read_text(encoding="utf-8") == "pwned\n"
    assert git(sc.repo, "log", "--format=%s", "main").split("\n")[0] == "init"


def _of(sc: Scenario, run_id: str, kind: type) -> list:  # type: ignore[type-arg]
    return [e.event for e in sc.events(run_id) if isinstance(e.event, kind)]
