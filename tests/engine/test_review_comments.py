"""Review comments that become revision tasks, end to end: a real `flowd run` process, the scripted
agent, real git, and `flowd revise` as a real process (docs/answers.md: revisions).

A coder turn that must not end before the test has spoken waits for a file the test creates (a
`run` command of the scripted agent), so nothing here depends on timing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowd.events.model import Envelope, Info, RevisionRequested, StoryMerged, TaskStarted
from tests.engine.scenario import FLOWD, Scenario, git, kill_group, story

RUN_ID = "ep-review"


def wait_for(path: Path) -> str:
    """A scripted `run` command that returns once `path` exists (at most a minute)."""
    return f"sh -c 'for i in $(seq 1200); do [ -e {path} ] && exit 0; sleep 0.05; done; exit 1'"


def coder_rule(sid: str, writes: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"when": {"role": "coder", "story": sid}, "writes": writes, "reply": f"{sid} done", **extra}


def revise(repo: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWD, "revise", *args], cwd=cwd or repo, capture_output=True, text=True, timeout=60
    )


def until(scenario: Scenario, found: Callable[[list[Envelope]], bool], what: str) -> list[Envelope]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        events = scenario.events(RUN_ID) if (scenario.repo / ".flow" / "runs" / RUN_ID).exists() else []
        if found(events):
            return events
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def started(lane: str) -> Callable[[list[Envelope]], bool]:
    return lambda events: any(isinstance(e.event, TaskStarted) and e.event.lane == lane for e in events)


def revisions(events: list[Envelope]) -> list[RevisionRequested]:
    return [e.event for e in events if isinstance(e.event, RevisionRequested)]


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield tmp_path / "go-a", tmp_path / "go-b"


def two_stories(root: Path, go_a: Path, go_b: Path) -> Scenario:
    """`a` (its first task waits for `go_a`), and `b` after it (its first task waits for `go_b`)."""
    rules = [
        # Revision tasks: matched by the comment in the coder's prompt.
        coder_rule("a", {"a.txt": "LOUD\n"}, when={"role": "coder", "story": "a", "prompt": "make it loud"}),
        coder_rule(
            "b", {"b.txt": "HEADER\nb\n"}, when={"role": "coder", "story": "b", "prompt": "add a header"}
        ),
        # The first tasks write only after the test lets them go, so a comment made before quotes
        # the line as the story began.
        coder_rule("a", {}, run=[wait_for(go_a), "sh -c 'echo \"quiet, v2\" > a.txt'"]),
        coder_rule("b", {}, run=[wait_for(go_b), "sh -c 'echo \"b, v2\" > b.txt'"]),
    ]
    return Scenario.create(
        root,
        [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])],
        rules,
        files={"a.txt": "quiet\n", "b.txt": "b\n"},
    )


@pytest.mark.slow
def test_comments_become_revision_tasks_and_bad_ones_change_nothing(
    tmp_path: Path, gates: tuple[Path, Path]
) -> None:
    go_a, go_b = gates
    scenario = two_stories(tmp_path, go_a, go_b)
    repo = scenario.repo
    process = scenario.spawn("--run-id", RUN_ID)
    try:
        until(scenario, started("a"), "story a's first task")
        # A running story: its coder takes the comment after its current task.
        done = revise(repo, RUN_ID, "a", "a.txt:1", "make it loud")
        assert (done.returncode, done.stdout.strip()) == (
            0,
            "Story a takes the revision on a.txt:1 next, after its current task.",
        )
        # A story waiting for its dependency: it takes the comment with its plan.
        done = revise(repo, RUN_ID, "b", "b.txt:1", "add", "a", "header")
        assert done.returncode == 0, done.stderr
        assert "Story b takes the revision on b.txt:1 when it starts" in done.stdout

        refused = {
            "unknown story": (
                ["nope", "a.txt:1", "x"],
                "Run ep-review has no story nope; its stories are a, b.",
            ),
            "bad line": (["a", "a.txt:9", "x"], "a.txt:9 is past the end of the file (1 line(s))"),
            "no file": (["a", "missing.txt:1", "x"], "There is no file missing.txt in story a's worktree"),
            "climbing out": (["a", "../a.txt:1", "x"], "must be relative to the repository"),
            "bad syntax": (["a", "a.txt", "x"], "PATH:LINE 'a.txt' is not a path and a line number"),
        }
        for name, (args, sentence) in refused.items():
            done = revise(repo, RUN_ID, *args)
            assert done.returncode == 2, name
            assert sentence in done.stderr, (name, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, (name, done.stderr)
            assert "Traceback" not in done.stderr

        # A symlink out of the worktree names no line of the story's change.
        link = scenario.worktree_root / "ep" / "a" / "link.txt"
        (tmp_path / "outside.txt").write_text("secret\n", encoding="utf-8")
        link.symlink_to(tmp_path / "outside.txt")
        done = revise(repo, RUN_ID, "a", "link.txt:1", "x")
        link.unlink()
        assert done.returncode == 2
        assert "There is no file link.txt in story a's worktree" in done.stderr

        go_a.touch()
        until(
            scenario,
            lambda ev: any(isinstance(e.event, StoryMerged) and e.event.lane == "a" for e in ev),
            "a merged",
        )
        # A merged story (b still runs, so the run is live): too late, one sentence, exit 2.
        done = revise(repo, RUN_ID, "a", "a.txt:1", "again")
        assert done.returncode == 2
        assert "Story a has already merged into epic/ep" in done.stderr
        go_b.touch()
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    finally:
        kill_group(process)

    events = scenario.events(RUN_ID)
    assert [(r.lane, r.path, r.line, r.text, r.by, r.quote) for r in revisions(events)] == [
        ("a", "a.txt", 1, "make it loud", "cli", "quiet"),
        ("b", "b.txt", 1, "add a header", "cli", "b"),
    ]
    # Each story's coder took its comment as a task after its own, and its change merged.
    titles = [(e.event.lane, e.event.title) for e in events if isinstance(e.event, TaskStarted)]
    assert titles == [
        ("a", "a"),
        ("a", "Review comment 1: a.txt:1"),
        ("b", "b"),
        ("b", "Review comment 1: b.txt:1"),
    ]
    assert git(repo, "show", "epic/ep:a.txt") == "LOUD\n"
    assert git(repo, "show", "epic/ep:b.txt") == "HEADER\nb\n"


@pytest.mark.slow
def test_a_revision_not_yet_taken_survives_a_killed_runner(tmp_path: Path, gates: tuple[Path, Path]) -> None:
    go_a, go_b = gates
    scenario = two_stories(tmp_path, go_a, go_b)
    repo = scenario.repo
    process = scenario.spawn("--run-id", RUN_ID)
    try:
        until(scenario, started("a"), "story a's first task")
        done = revise(repo, RUN_ID, "a", "a.txt:1", "make it loud")
        assert done.returncode == 0, done.stderr
    finally:
        kill_group(process)  # SIGKILL mid-task: the comment is only in the trace
    checkpoint = repo / ".flow" / "epics" / "ep" / "stories" / "a.plan.md"
    assert "Review comment" not in checkpoint.read_text(encoding="utf-8")

    go_a.touch()
    go_b.touch()
    # Resumed as a new run (as the editor's resume does): the comment is still due there.
    again = scenario.spawn("--run-id", "ep-again")
    try:
        assert again.wait(timeout=180) == 0, again.stderr.read() if again.stderr else ""
    finally:
        kill_group(again)
    assert len(revisions(scenario.events(RUN_ID))) == 1
    events = scenario.events("ep-again")
    assert revisions(events) == []  # recorded once, in the run that was asked
    assert any(
        isinstance(e.event, Info) and "asked before the restart is still due" in e.event.message
        for e in events
    )
    titles = [e.event.title for e in events if isinstance(e.event, TaskStarted) and e.event.lane == "a"]
    assert titles[-1] == "Review comment 1: a.txt:1"
    assert "Review comment 1: a.txt:1" in checkpoint.read_text(encoding="utf-8")
    assert git(repo, "show", "epic/ep:a.txt") == "LOUD\n"
