"""A run whose agents commit themselves, confined (docs/sandbox.md "The quarantine"): their
commits go to each lane's own store, flowd takes them in after each step and the epic merges
them; a lane whose git wrote a disconnected commit is refused, its story fails with one sentence,
the other story finishes, and the user's repository passes `git fsck --full` after the run."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flowd.events.model import LaneEscape
from flowd.sandbox import landlock
from flowd.vcs.quarantine import QUARANTINE_DIR
from tests.engine.scenario import Scenario, coder, git, story

COMMIT = "git -c user.name=a -c user.email=a@a commit -q -m"
MISSING = '{"issues": [{"severity": "major", "title": "no change", "description": "nothing shown"}], "summary": "no"}'


def _fsck(repo: Path) -> None:
    done = subprocess.run(
        ["git", "fsck", "--full", "--no-dangling"], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _quarantined(repo: Path) -> list[Path]:
    return [p for p in (repo / ".git" / "worktrees").glob(f"*/{QUARANTINE_DIR}/**/*") if p.is_file()]


def test_an_agents_own_commits_are_taken_in_and_merged(tmp_path: Path) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    rules = [
        # Each agent commits, and leaves more uncommitted for flowd's own commit of the task on top.
        coder(
            "a", run=[f"echo one > a.txt && git add a.txt && {COMMIT} 'a by its agent' && echo more >> a.txt"]
        ),
        coder(
            "b",
            run=[
                f"grep -q one a.txt && echo 2 > b.txt && git add b.txt && {COMMIT} 'b by its agent' && echo 3 >> b.txt"
            ],
        ),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    log = git(sc.repo, "log", "--format=%s", "epic/ep")
    assert "a by its agent" in log and "b by its agent" in log
    assert not any(isinstance(e.event, LaneEscape) for e in sc.events(result.run_id))
    assert _quarantined(sc.repo) == []
    _fsck(sc.repo)


def test_a_lane_whose_objects_fail_the_check_is_refused(tmp_path: Path) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    forged = (
        "t=$(git rev-parse HEAD^{tree}) && "
        "c=$(printf 'tree %s\\nparent 1111111111111111111111111111111111111111\\nauthor a <a@a> 1 +0000\\n"
        "committer a <a@a> 1 +0000\\n\\nforged\\n' $t | git hash-object -t commit -w --stdin --literally) && "
        "git update-ref HEAD $c"
    )
    stories = [story("bad", ["bad.txt"]), story("good", ["good.txt"])]
    rules = [
        coder(
            "bad",
            run=[f"echo x > bad.txt && git add bad.txt && {COMMIT} ok && {forged} && echo y >> bad.txt"],
        ),
        coder(
            "good",
            run=[
                f"echo y > good.txt && git add good.txt && {COMMIT} 'good by its agent' && echo z >> good.txt"
            ],
        ),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    lanes = result.view.lanes
    assert lanes["good"].status == "done" and lanes["bad"].status == "failed", {
        k: v.reason for k, v in lanes.items()
    }
    assert "refused the objects story 'bad' wrote" in (lanes["bad"].reason or "")
    escapes = [e.event for e in sc.events(result.run_id) if isinstance(e.event, LaneEscape)]
    assert [(e.lane, e.what, e.action) for e in escapes] == [("bad", "gitObjects", "undone")]
    findings = sc.repo / ".flow" / "epics" / "ep" / "stories" / "bad.findings.md"
    assert "## Objects refused" in findings.read_text(encoding="utf-8")
    assert "good by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")
    _fsck(sc.repo)


def test_a_refused_commit_leaves_no_reflog_entry_naming_it(tmp_path: Path) -> None:
    """A lane's commit whose blob only a store of its own holds (named in its quarantine's
    alternates) is refused; the entries its git logged in the branch's reflog and the worktree's
    `logs/HEAD` go with it, and `git fsck --full` of the repository finds no invalid one."""
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    hidden = (
        'Q="${GIT_OBJECT_DIRECTORY:-$(git rev-parse --path-format=absolute --git-path objects)}"; '
        'S="$TMPDIR/hidden"; mkdir -p "$S"; '
        'B=$(echo hidden | GIT_OBJECT_DIRECTORY="$S" git hash-object -w --stdin); '
        'mkdir -p "$Q/info"; echo "$S" >> "$Q/info/alternates"; '
        'git update-index --add --cacheinfo "100644,$B,hidden.txt"'
    )
    stories = [story("bad", ["bad.txt"])]
    rules = [
        coder(
            "bad",
            run=[
                f"echo x > bad.txt && {hidden} && {COMMIT} hidden && git reset -q --hard HEAD~1 && echo y >> bad.txt"
            ],
        )
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    result = sc.run()
    assert result.view.lanes["bad"].status == "failed", result.view.lanes["bad"].reason
    assert "refused the objects story 'bad' wrote" in (result.view.lanes["bad"].reason or "")
    logs = [sc.repo / ".git" / "logs" / "refs" / "heads" / "story" / "ep" / "bad"]
    logs += list((sc.repo / ".git" / "worktrees").glob("*/logs/HEAD"))
    named = {
        word
        for log in logs
        if log.exists()
        for line in log.read_text().splitlines()
        for word in line.split()[:2]
    }
    named.discard("0" * 40)
    held = subprocess.run(
        ["git", "cat-file", "--batch-check"], cwd=sc.repo, input="\n".join(sorted(named)) + "\n",
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert " missing" not in held.stdout, held.stdout
    _fsck(sc.repo)


def test_an_agent_that_commits_all_its_work_itself_has_done_its_task(tmp_path: Path) -> None:
    """Nothing left uncommitted: the task is done by the agent's own commit, not "changed nothing",
    and the reviewer is shown that commit's change."""
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    rules = [
        coder("a", run=[f"echo one > a.txt && git add a.txt && {COMMIT} 'a, all of it, by its agent'"]),
        # The reviewer passes the task only when it is shown the agent's committed change.
        {"when": {"role": "reviewer", "prompt": r"\+one"}, "reply": '{"issues": [], "summary": "ok"}'},
        {"when": {"role": "reviewer"}, "reply": MISSING},
    ]
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], rules)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert "a, all of it, by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")
    assert git(sc.repo, "show", "epic/ep:a.txt") == "one\n"
    _fsck(sc.repo)
