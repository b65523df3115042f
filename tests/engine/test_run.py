"""The epic engine end to end: real repositories, the scripted ACP agent, real gates."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.events.model import PerimeterViolation, StoryStatusChanged
from tests.engine.scenario import (
    DIAMOND,
    FLOWD,
    Scenario,
    coder,
    diamond_rules,
    git,
    kill_group,
    story,
    types,
)


def test_diamond_epic_merges_every_story_once_and_leaves_the_users_checkout_alone(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path, DIAMOND, diamond_rules(), settings='gates = ["test -f README.md"]\njudgeRounds = 0\n'
    )
    (sc.repo / "notes.txt").write_text("user's own uncommitted work\n", encoding="utf-8")
    result = sc.run()
    assert result.outcome == "done" and result.exit_code == 0
    merges = sc.merge_commits()
    assert sorted(merges) == sorted(f"ep: merge story {s['id']}" for s in DIAMOND)
    files = sc.epic_files()
    for path in ("src/base.py", "src/left.py", "src/right.py", "src/top.py", "docs/a.md"):
        assert path in files
    # The user's checkout: same branch, their file untouched, nothing else dirty.
    assert git(sc.repo, "branch", "--show-current").strip() == "main"
    assert git(sc.repo, "status", "--porcelain").splitlines() == ["?? ep.epic.json", "?? notes.txt"]
    assert (sc.repo / "notes.txt").read_text(encoding="utf-8") == "user's own uncommitted work\n"
    # Merged stories' worktrees are gone; the epic's own worktree stays.
    assert sorted(p.name for p in (sc.worktree_root / "ep").iterdir()) == ["_epic"]
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    assert [s["status"] for s in report["stories"]] == ["done"] * 5
    events = sc.events(result.run_id)
    seen = list(types(events))
    assert seen[0] == "RunStarted" and seen[-1] == "RunEnded"
    # `top` waited for both sides of the diamond.
    order = [e.event.lane for e in events if e.event.type == "StoryMerged"]
    assert order.index("top") > max(order.index("left"), order.index("right")) > order.index("base")


def test_critical_path_launches_first(tmp_path: Path) -> None:
    stories = [story("solo", ["solo.txt"]), story("chain", ["c1.txt"]), story("tail", ["c2.txt"], ["chain"])]
    rules = [
        coder("solo", {"solo.txt": "s"}),
        coder("chain", {"c1.txt": "c"}),
        coder("tail", {"c2.txt": "t"}),
    ]
    sc = Scenario.create(tmp_path, stories, rules, settings="concurrency = 1\njudgeRounds = 0\n")
    result = sc.run()
    started = [
        e.event.story
        for e in sc.events(result.run_id)
        if isinstance(e.event, StoryStatusChanged) and e.event.status == "active"
    ]
    # chain heads the longest chain; then solo and tail (rank 1 each) go in plan order.
    assert started == ["chain", "solo", "tail"]


def test_a_stray_write_is_sent_back_then_restored_and_never_reaches_the_epic(tmp_path: Path) -> None:
    stories = [story("api", ["src/api/"]), story("ui", ["src/ui/"])]
    rules = [
        coder("api", {"src/api/login.py": "x = 1\n", "stray.txt": "oops\n", "src/ui/hack.py": "y\n"}),
        coder("ui", {"src/ui/view.py": "v = 1\n"}),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    assert result.outcome == "done"
    files = sc.epic_files()
    assert "src/api/login.py" in files and "stray.txt" not in files and "src/ui/hack.py" not in files
    violations = [e.event for e in sc.events(result.run_id) if isinstance(e.event, PerimeterViolation)]
    assert violations[0].action == "flagged" and violations[-1].action == "restored"
    kinds = {p.path: p.kind for p in violations[-1].paths}
    assert kinds == {"stray.txt": "outside", "src/ui/hack.py": "foreignOwned"}
    # The repair undid changes: the report's note and the story's findings say which.
    said = (
        "perimeter repair restored 2 path(s) outside the story's perimeter from epic/ep, undoing their "
        "changes: src/ui/hack.py (foreignOwned), stray.txt (outside)"
    )
    report = json.loads((sc.repo / ".flow" / "epics" / "ep" / "report.json").read_text())
    api = next(s for s in report["stories"] if s["id"] == "api")
    assert api["note"].startswith(said + "; ")
    findings = (sc.repo / ".flow" / "epics" / "ep" / "stories" / "api.findings.md").read_text()
    assert f"## Perimeter repair\n\n{said}\n" in findings


def test_red_epic_gates_roll_the_merge_back_and_dependents_wait(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"]), story("c", ["c.txt"], ["b"])]
    rules = [coder("a", {"a.txt": "a"}), coder("b", {"b.txt": "b"}, delayMs=1500), coder("c", {"c.txt": "c"})]
    gate = "sh -c 'if [ -f a.txt ] && [ -f b.txt ]; then echo both present; exit 1; fi'"
    sc = Scenario.create(
        tmp_path,
        stories,
        rules,
        settings=f"gates = [{json.dumps(gate)}]\njudgeRounds = 0\nmergeRevisionRounds = 0\n",
    )
    result = sc.run()
    assert result.outcome == "failed" and result.exit_code == 1
    assert sc.merge_commits() == ["ep: merge story a"]
    assert "b.txt" not in sc.epic_files()
    lanes = result.view.lanes
    assert lanes["b"].status == "failed" and "merge undone" in (lanes["b"].reason or "")
    assert "both present" in (lanes["b"].reason or "")
    assert lanes["c"].status == "waiting" and lanes["c"].reason == "waiting for b"
    types_seen = list(types(sc.events(result.run_id)))
    assert "MergeRolledBack" in types_seen
    # The epic head is a green commit: the gate passes there.
    epic = sc.worktree_root / "ep" / "_epic"
    assert subprocess.run(["sh", "-c", gate], cwd=epic).returncode == 0


def test_invalid_plan_touches_nothing(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["x"]), story("a", ["x"])], [])
    with pytest.raises(InputError) as caught:
        sc.run()
    assert "duplicate" in str(caught.value)
    assert not (sc.repo / ".flow" / "epics").exists() and not (sc.repo / ".flow" / "runs").exists()
    assert git(sc.repo, "branch").split() == ["*", "main"]


def test_dirty_epic_worktree_stops_before_anything(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a"})])
    assert sc.run().outcome == "done"
    (sc.worktree_root / "ep" / "_epic" / "junk.txt").write_text("x", encoding="utf-8")
    runs_before = sorted((sc.repo / ".flow/runs").iterdir())
    proc = subprocess.run([*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "junk.txt" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted((sc.repo / ".flow/runs").iterdir()) == runs_before


def test_changed_plan_entry_restarts_only_that_story(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    rules = [
        coder("a", {"a.txt": "a"}),
        {"when": {"role": "coder", "story": "b", "prompt": "OLD"}, "fail": "error"},
        coder("b", {"b.txt": "b"}),
    ]
    stories[1]["description"] = "OLD description"
    sc = Scenario.create(tmp_path, stories, rules)
    first = sc.run()
    assert first.outcome == "failed" and first.view.lanes["b"].status == "failed"
    plan = json.loads(sc.plan_path.read_text(encoding="utf-8"))
    plan["stories"][1]["description"] = "NEW description"
    sc.plan_path.write_text(json.dumps(plan), encoding="utf-8")
    second = sc.run()
    assert second.outcome == "done"
    infos = [(e.event.lane, e.event.message) for e in sc.events(second.run_id) if e.event.type == "Info"]
    assert ("b", "plan entry changed since its branch was created; starting over") in infos
    assert ("a", "already merged; skipping") in infos
    coder_turns = [
        e.event.lane
        for e in sc.events(second.run_id)
        if e.event.type == "TokensUsed" and e.event.agent == "coder"
    ]
    assert set(coder_turns) == {"b"}
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]


def _wait_for(
    process: subprocess.Popen[bytes], predicate: str, timeout: float = 60.0
) -> list[dict[str, object]]:
    """Read the runner's JSON event lines until one contains `predicate`."""
    assert process.stdout is not None
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        seen.append(event)
        if predicate in line.decode():
            return seen
    raise AssertionError(f"never saw {predicate!r}; last events: {seen[-3:]}")


def test_sigkill_mid_run_then_rerun_finishes_with_no_duplicate_merge(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, DIAMOND, diamond_rules(delay=300))
    process = sc.spawn("--run-id", "first")
    try:
        _wait_for(process, '"StoryMerged"')
    finally:
        kill_group(process)
    # The killed run left a stale lock and unfinished stories; a new run takes over.
    again = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--json"], cwd=sc.repo, capture_output=True, timeout=180
    )
    assert again.returncode == 0, again.stderr.decode()
    merges = sc.merge_commits()
    assert sorted(merges) == sorted(f"ep: merge story {s['id']}" for s in DIAMOND)
    assert sc.lanes_left() == ["_epic"]
    states = [json.loads(p.read_text()) for p in (sc.repo / ".flow/epics/ep/stories").glob("*.json")]
    assert {s["status"] for s in states} == {"merged"}


def test_second_launch_is_refused_and_sigterm_cancels_resumably(tmp_path: Path) -> None:
    # The coder's turn outlasts any load on the machine: the test cancels it, never waits it out.
    slow = coder("slow", {"s.txt": "s"}, delayMs=300_000)
    sc = Scenario.create(tmp_path, [story("slow", ["s.txt"])], [slow])
    process = sc.spawn("--run-id", "one")
    try:
        _wait_for(process, '"TaskStarted"')
        second = subprocess.run(
            [*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True
        )
        assert second.returncode == 2
        assert "already running as run one" in second.stderr
        cancel = subprocess.run(
            [*FLOWD, "cancel", "one"], cwd=sc.repo, capture_output=True, text=True, timeout=60
        )
        assert cancel.returncode == 0 and "cancelled" in cancel.stdout
        assert process.wait(timeout=30) == 130
    finally:
        kill_group(process)
    record = json.loads((sc.repo / ".flow/runs/one/run.json").read_text(encoding="utf-8"))
    assert record["outcome"] == "cancelled" and record["endedAt"]
    assert (sc.worktree_root / "ep" / "slow").is_dir()
    assert (sc.repo / ".flow/epics/ep/report.md").exists()
    assert not (sc.repo / ".flow/epics/ep/lock").exists()
    unknown = subprocess.run([*FLOWD, "cancel", "nope"], cwd=sc.repo, capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown run" in unknown.stderr


def test_budget_stop_halts_with_exit_3(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    usage = {"input": 1000, "output": 100, "costUsd": 0.5}
    rules = [coder("a", {"a.txt": "a"}, usage=usage), coder("b", {"b.txt": "b"}, usage=usage)]
    sc = Scenario.create(tmp_path, stories, rules)
    proc = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--budget-usd", "0.4", "--json"],
        cwd=sc.repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    events = [json.loads(line)["event"] for line in proc.stdout.splitlines()]
    exceeded = [e for e in events if e["type"] == "BudgetExceeded"]
    assert exceeded and exceeded[0]["scope"] == "epic" and exceeded[0]["limitUsd"] == 0.4
    assert events[-1]["type"] == "RunEnded" and events[-1]["outcome"] == "halted"
    assert sc.merge_commits() == ["ep: merge story a"]


def test_coders_holding_every_slot_borrow_their_clone_for_other_roles(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"]), story("c", ["c.txt"])]
    rules = [coder(s, {f"{s}.txt": s}) for s in ("a", "b", "c")]
    sc = Scenario.create(
        tmp_path,
        stories,
        rules,
        settings="concurrency = 2\njudgeRounds = 1\nmaxReviewRounds = 1\n",
        executors=[{"id": "solo", "script": "script.json", "slots": 2}],
    )
    result = sc.run()
    assert result.outcome == "done"
    borrowed = [
        e.event for e in sc.events(result.run_id) if e.event.type == "ExecutorLeased" and e.event.borrowed
    ]
    assert borrowed and all(e.clone is None and e.role != "coder" for e in borrowed)
    assert not any(c.held for c in result.view.clones.values())


def test_a_single_slot_executor_serves_every_role_of_its_story(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"])],
        [coder("a", {"a.txt": "a"})],
        settings="judgeRounds = 1\nmaxReviewRounds = 1\n",
        executors=[{"id": "solo", "script": "script.json", "slots": 1}],
    )
    result = sc.run()
    assert result.outcome == "done"
    roles = {
        e.event.role
        for e in sc.events(result.run_id)
        if e.event.type == "ExecutorLeased" and e.event.borrowed
    }
    assert {"planner", "reviewer", "judge"} <= roles


def test_reviewer_and_judge_prefer_an_executor_other_than_the_storys_coder(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("a", ["a.txt"])],
        [coder("a", {"a.txt": "a"})],
        settings="judgeRounds = 1\nmaxReviewRounds = 1\n",
        executors=[
            {"id": "one", "script": "script.json", "slots": 2},
            {"id": "two", "script": "script.json", "slots": 2, "priority": 2},
        ],
    )
    result = sc.run()
    assert result.outcome == "done"
    turns = [
        (e.event.agent, e.event.executor) for e in sc.events(result.run_id) if e.event.type == "TokensUsed"
    ]
    # The coder takes `one` (better priority); review and judging still go to `two`.
    assert {x for role, x in turns if role == "coder"} == {"one"}
    assert {x for role, x in turns if role in ("reviewer", "judge")} == {"two"}
