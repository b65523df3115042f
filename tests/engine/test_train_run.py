"""The merge train end to end (docs/merging.md): real repositories, the scripted agent, real gates.

Every epic gate run that passes records the commit it passed (outside the repository), so the
tests can check the one invariant that matters most: the epic branch only ever pointed at commits
the epic gates passed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from flowd.events.model import Info, LaneEscape, MergeBatchStarted, MergeBisect, MergeRevision, StoryMerged
from tests.engine.scenario import Scenario, coder, git, story

ON_EPIC = '[ "$(basename "$(pwd)")" = _epic ]'


def gate(green_log: Path, sleep: float = 0.0, hold: str = "") -> str:
    """Red on the epic while a file says BROKEN; green runs on the epic log the commit they passed.
    `hold`: a shell step each epic run takes first (`queued`)."""
    return (
        f"sh -c '{ON_EPIC} || exit 0; {hold} sleep {sleep:g}; "
        'if grep -l BROKEN src/*.py 2>/dev/null; then echo "epic check: BROKEN"; exit 1; fi; '
        f"git rev-parse HEAD >> {green_log}'"
    )


def green_log_in(tmp_path: Path) -> Path:
    """The gates' log, in a folder of its own: the only place outside its worktree a confined gate
    may write (`[sandbox] allowWrite`, docs/sandbox.md)."""
    folder = tmp_path / "gate-log"
    folder.mkdir()
    return folder / "green.log"


def until_in_train(repo: Path, story: str) -> str:
    """A command a coder runs last (a minute at most): until `story` has entered the merge train,
    its `story X: merge` stage in the run's trace. Its story then enters the train after `story`
    however slow the machine (a delay alone orders them only on an idle one)."""
    stages = f"{repo}/.flow/runs/*/trace.jsonl"
    seen = f'grep -q "\\"stage\\": *\\"story {story}: merge\\"" {stages} 2>/dev/null'
    return f"i=0; until {seen} || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done"


def queued(repo: Path, count: int) -> str:
    """An epic gate step that waits (a minute at most) until `count` stories have entered the
    merge train, their `story X: merge` stage in the run's trace: the gate run of the first
    candidate then ends with every other story queued behind it, so they are gated as one batch
    on any machine, however slow (the later runs find them there at once)."""
    stages = f"{repo}/.flow/runs/*/trace.jsonl"
    found = f'grep -ho "\\"stage\\": *\\"story [a-z]*: merge\\"" {stages} 2>/dev/null | sort -u | wc -l'
    return f'i=0; until [ "$({found})" -ge {count} ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done;'


def settings(green_log: Path, *more: str, sleep: float = 0.0, hold: str = "", lanes: int = 4) -> str:
    lines = [
        f"gates = [{json.dumps(gate(green_log, sleep, hold))}]",
        f"concurrency = {lanes}",
        "judgeRounds = 0",
        "maxReviewRounds = 0",
        "gateRetries = 0",
        *more,
    ]
    sandbox = f"[sandbox]\nallowWrite = [{json.dumps(str(green_log.parent))}]\n"
    return "\n".join(lines) + "\n" + sandbox


def epic_positions(sc: Scenario) -> list[str]:
    """Every commit `epic/ep` pointed at, oldest first, but its creation."""
    lines = git(sc.repo, "reflog", "--format=%H", "epic/ep").split()
    return list(reversed(lines))[1:]


def test_a_red_story_in_a_batch_is_found_by_bisection_and_every_story_merges_once(tmp_path: Path) -> None:
    green = green_log_in(tmp_path)
    ids = ["a", "b", "c", "d"]
    fix = coder("c", {"src/c.py": "C = 3\n"})
    fix["when"]["prompt"] = "epic check: BROKEN"  # the merge revision's prompt carries the red output
    # `a` comes first (the others end their coder turns once it is in the train): they queue
    # behind a's candidate (its gate run holds until they have) and are gated together.
    broken = {s: f"{s.upper()} = 1{'  # BROKEN' if s == 'c' else ''}\n" for s in ids}
    after_a = {"run": [until_in_train(tmp_path / "repo", "a")]}
    work = [coder(s, {f"src/{s}.py": broken[s]}, **({} if s == "a" else after_a)) for s in ids]
    rules = [fix, *work]
    sc = Scenario.create(
        tmp_path,
        [story(s, [f"src/{s}.py"]) for s in ids],
        rules,
        settings=settings(green, "mergeConcurrency = 1", hold=queued(tmp_path / "repo", len(ids))),
    )
    result = sc.run()
    assert result.outcome == "done", result.view.reason
    events = [e.event for e in sc.events(result.run_id)]
    # Every story merged exactly once, with its own merge commit; only c was revised.
    assert sorted(sc.merge_commits()) == [f"ep: merge story {s}" for s in ids]
    merged = [e for e in events if isinstance(e, StoryMerged)]
    assert sorted(m.lane for m in merged) == ids and len({m.commit for m in merged}) == 4
    assert [e.lane for e in events if isinstance(e, MergeRevision)] == ["c"]
    # The epic only ever moved to commits its gates passed.
    passed = set(green.read_text(encoding="utf-8").split())
    assert epic_positions(sc) and set(epic_positions(sc)) <= passed
    # The batch of b, c and d was bisected down to c.
    batches = [e for e in events if isinstance(e, MergeBatchStarted)]
    holding_c = next(b for b in batches if "c" in b.lanes)
    assert sorted(holding_c.lanes) == ["b", "c", "d"], [b.lanes for b in batches]
    culprits = [e.culprit for e in events if isinstance(e, MergeBisect) and e.culprit]
    assert culprits == ["c"]
    assert not (sc.worktree_root / "ep" / "_train").exists()
    report = json.loads((sc.repo / ".flow/epics/ep/report.json").read_text(encoding="utf-8"))
    assert [b["batch"] for b in report["mergeTrain"]["batches"]] == [b.batch for b in batches]


def test_the_story_whose_file_the_red_output_names_is_bisected_alone_first(tmp_path: Path) -> None:
    green = green_log_in(tmp_path)
    ids = ["a", "b", "c", "d", "e"]
    fix = coder("c", {"src/c.py": "C = 3\n"})
    fix["when"]["prompt"] = "epic check: BROKEN"
    broken = {s: f"{s.upper()} = 1{'  # BROKEN' if s == 'c' else ''}\n" for s in ids}
    # `a` comes first: the others end their coder turns only once it is in the train, and queue
    # behind its candidate (one gate slot; its gate run holds until they have), gated together;
    # the red gate prints `src/c.py` (grep -l), the file only c's merge brought.
    after_a = {"run": [until_in_train(tmp_path / "repo", "a")]}
    work = [coder(s, {f"src/{s}.py": broken[s]}, **({} if s == "a" else after_a)) for s in ids]
    sc = Scenario.create(
        tmp_path,
        [story(s, [f"src/{s}.py"]) for s in ids],
        [fix, *work],
        # A lane for each (the others' coders wait for `a`, which must not wait for a lane).
        settings=settings(
            green, "mergeConcurrency = 1", hold=queued(tmp_path / "repo", len(ids)), lanes=len(ids)
        ),
    )
    result = sc.run()
    assert result.outcome == "done", result.view.reason
    events = [e.event for e in sc.events(result.run_id)]
    assert sorted(sc.merge_commits()) == [f"ep: merge story {s}" for s in ids]
    assert [e.lane for e in events if isinstance(e, MergeRevision)] == ["c"]
    assert set(epic_positions(sc)) <= set(green.read_text(encoding="utf-8").split())
    holding_c = next(e for e in events if isinstance(e, MergeBatchStarted) and "c" in e.lanes)
    parts = [e.lanes for e in events if isinstance(e, MergeBisect) and e.batch == holding_c.batch]
    assert sorted(holding_c.lanes) == ["b", "c", "d", "e"], holding_c.lanes
    # The others first (they land), c alone last: it is found in the bisection's first round.
    rest = [s for s in holding_c.lanes if s != "c"]
    assert parts == [rest, ["c"], ["c"]], parts  # the two parts, then c named the culprit


def test_a_story_after_its_dependency_and_one_at_a_time_as_before(tmp_path: Path) -> None:
    green = green_log_in(tmp_path)
    stories = [
        story("base", ["src/base.py"]),
        story("top", ["src/top.py"], ["base"]),
        story("x", ["src/x.py"]),
    ]
    rules = [coder(s["id"], {f"src/{s['id']}.py": "V = 1\n"}) for s in stories]
    sc = Scenario.create(
        tmp_path, stories, rules, settings=settings(green, "mergeBatch = 1", "mergeConcurrency = 1")
    )
    result = sc.run()
    assert result.outcome == "done"
    events = [e.event for e in sc.events(result.run_id)]
    batches = [e for e in events if isinstance(e, MergeBatchStarted)]
    assert all(len(b.lanes) == 1 for b in batches) and len(batches) == 3
    order = [e.lane for e in events if isinstance(e, StoryMerged)]
    assert order.index("base") < order.index("top")
    assert set(epic_positions(sc)) <= set(green.read_text(encoding="utf-8").split())


def test_what_an_epic_gate_plants_in_its_candidates_admin_dir_is_put_back_before_flowd_reuses_it(
    tmp_path: Path,
) -> None:
    """A story's epic gate, in its merge candidate, plants a filter driver in the `config.worktree`
    of its git dir (with a `.gitattributes` naming it) and links that git dir's `logs/HEAD` to a
    reflog, in every candidate. Its git dir is the candidate's lane repository, never read by
    flowd's git and made anew for the next candidate in the slot: no filter runs, nothing is
    appended to your reflog, and nothing needs putting back."""
    proof = tmp_path / "gate-log" / "filter-ran"
    driver = f'sh -c \\"echo ran >> {proof}; cat\\"'
    plant = (
        f"sh -c '{ON_EPIC} || exit 0; "
        "A=$(git rev-parse --absolute-git-dir); "
        f'git config --worktree filter.evil.smudge "{driver}"; git config --worktree filter.evil.clean "{driver}"; '
        'printf "* filter=evil\\n" > .gitattributes; '
        'rm -f "$A/logs/HEAD"; ln -s "$(git rev-parse --git-common-dir)/logs/refs/heads/wip" "$A/logs/HEAD"\''
    )
    stories = [story("a", ["src/a.py"]), story("b", ["src/b.py"], ["a"])]
    rules = [coder(s["id"], {f"src/{s['id']}.py": "V = 1\n"}) for s in stories]
    more = (
        f"gates = [{json.dumps(plant)}]\nconcurrency = 2\njudgeRounds = 0\nmaxReviewRounds = 0\n"
        "gateRetries = 0\nmergeBatch = 1\nmergeConcurrency = 1\n"
        f"[sandbox]\nallowWrite = [{json.dumps(str(proof.parent))}]\n"
    )
    proof.parent.mkdir()
    sc = Scenario.create(tmp_path, stories, rules, settings=more)
    git(sc.repo, "branch", "wip")
    git(sc.repo, "config", "extensions.worktreeConfig", "true")  # as a sparse checkout sets it
    reflog = sc.repo / ".git" / "logs" / "refs" / "heads" / "wip"
    before = reflog.read_bytes()
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert not proof.exists(), proof.read_text(encoding="utf-8")
    assert reflog.read_bytes() == before
    # Both went to the candidate's lane repository (its own git dir, docs/sandbox.md "The lane
    # repository"): the admin dir flowd's git uses never changed, so nothing is put back or said.
    escapes = [e.event for e in sc.events(result.run_id) if isinstance(e.event, LaneEscape)]
    assert escapes == [], escapes


def test_what_an_epic_gate_commits_in_its_candidate_is_thrown_away_and_its_head_put_back(
    tmp_path: Path,
) -> None:
    """A story's epic gate commits in its merge candidate (its git writes the candidate's own
    object quarantine, and moves the candidate's detached HEAD to that commit) and writes a loose
    blob no ref names. When the gates end flowd throws the quarantine away (a candidate keeps
    nothing its gates wrote: none of it reaches your repository) and puts the HEAD back at the
    candidate's tip: a `gitObjects` escape of the story, the blob said in an `Info`; your
    repository's `git fsck --full` stays clean and the story merges."""
    log = tmp_path / "gate-log" / "wrote"
    plant = (
        f'sh -c \'{ON_EPIC} || exit 0; case "$PWD" in */_train/*) ;; *) exit 0 ;; esac; '
        "echo evil > evil.txt; git add evil.txt; git commit -q -m evil; "
        f"git rev-parse HEAD >> {log}; echo orphan-{tmp_path.name} | git hash-object -w --stdin >> {log}'"
    )
    more = (
        f"gates = [{json.dumps(plant)}]\njudgeRounds = 0\nmaxReviewRounds = 0\ngateRetries = 0\n"
        f"[sandbox]\nallowWrite = [{json.dumps(str(log.parent))}]\n"
    )
    log.parent.mkdir()
    sc = Scenario.create(
        tmp_path, [story("a", ["src/a.py"])], [coder("a", {"src/a.py": "V = 1\n"})], settings=more
    )
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sc.merge_commits() == ["ep: merge story a"]
    commit, blob = log.read_text(encoding="utf-8").split()[:2]
    kept = subprocess.run(["git", "cat-file", "-e", commit], cwd=sc.repo, capture_output=True)
    assert kept.returncode != 0, "the gate's commit reached the user's repository"
    assert subprocess.run(["git", "cat-file", "-e", blob], cwd=sc.repo, capture_output=True).returncode != 0
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--no-dangling"], cwd=sc.repo, capture_output=True, text=True
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    escapes = [e.event for e in sc.events(result.run_id) if isinstance(e.event, LaneEscape)]
    assert [(e.lane, e.what, e.action, Path(e.path).name) for e in escapes] == [
        ("a", "gitObjects", "undone", "HEAD")
    ], escapes
    infos = [e.event.message for e in sc.events(result.run_id) if isinstance(e.event, Info)]
    assert any("flowd-objects: held 4 object(s) the epic gates wrote" in m for m in infos), infos
