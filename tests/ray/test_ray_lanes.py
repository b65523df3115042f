"""Story lanes on a real local Ray cluster (docs/scale-out.md): a head and a worker node started with
`ray start` on loopback, a bare repository as the remote, the scripted agent as the roster."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.engine.scenario import DIAMOND, FLOWD, Scenario, coder, diamond_rules, git, kill_group, story
from tests.ray.cluster import Cluster, driver_env

# Placing an actor and starting its agents takes seconds on a loaded machine.
pytestmark = pytest.mark.timeout(600)

SETTINGS = 'gates = ["test -f README.md"]\njudgeRounds = 0\n\n[lanes]\nengine = "ray"\nremote = "origin"\n'


def long_story_rules() -> list[dict[str, Any]]:
    """Story `long`: three tasks of 2 s each, each writing its own file (so a resumed lane shows
    which tasks it did not redo)."""
    return [
        {"when": {"role": "planner", "story": "long"}, "reply": THREE_TASKS},
        *[{"when": {"role": "coder", "story": "long", "task": f"step {n}"}, "writes": {f"long/{n}.txt": n},
           "reply": "done", "delayMs": 2000} for n in ("one", "two", "three")],
    ]  # fmt: skip


def on_ray(tmp_path: Path, stories: list[dict[str, Any]], rules: list[dict[str, Any]]) -> Scenario:
    sc = Scenario.create(tmp_path, stories, rules, settings=SETTINGS)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(sc.repo, "remote", "add", "origin", str(bare))
    return sc


def run(sc: Scenario, cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWD, "run", str(sc.plan_path), "--json", *args],
        cwd=sc.repo, env=driver_env(cluster.address), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def spawn(sc: Scenario, cluster: Cluster, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*FLOWD, "run", str(sc.plan_path), "--json", *args],
        cwd=sc.repo, env=driver_env(cluster.address), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip


def wait_for(process: subprocess.Popen[bytes], predicate: str) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if predicate in line.decode():
            return
    raise AssertionError(
        f"the run ended before {predicate!r}: {process.stderr.read().decode() if process.stderr else ''}"
    )


def trace(sc: Scenario, run_id: str) -> list[dict[str, Any]]:
    lines = (sc.repo / ".flow" / "runs" / run_id / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["event"] for line in lines]


def no_lane_actors_left(cluster: Cluster) -> bool:
    """Ray ends a dead driver's actors on its own schedule: wait for it (what is asserted is the end)."""
    for _ in range(120):
        if not cluster.node_pids("ray::LaneHost"):
            return True
        time.sleep(0.5)
    return False


def test_diamond_epic_runs_its_lanes_on_the_cluster_and_merges_each_once(
    tmp_path: Path, cluster: Cluster
) -> None:
    sc = on_ray(tmp_path, DIAMOND, diamond_rules())
    done = run(sc, cluster, "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    assert sorted(sc.merge_commits()) == sorted(f"ep: merge story {s['id']}" for s in DIAMOND)
    for path in ("src/base.py", "src/left.py", "src/right.py", "src/top.py", "docs/a.md"):
        assert path in sc.epic_files()
    events = trace(sc, "r1")
    placed = {e["lane"]: e["node"] for e in events if e["type"] == "LanePlaced"}
    assert sorted(placed) == sorted(s["id"] for s in DIAMOND)
    assert all(e["engine"] == "ray" for e in events if e["type"] == "LanePlaced")
    # The lanes' work came back through the remote: every story branch is there.
    pushed = git(tmp_path / "remote.git", "branch", "--list", "story/ep/*").split()
    assert sorted(pushed) == sorted(f"story/ep/{s['id']}" for s in DIAMOND)
    # Nothing of a lane ran in the runner's checkout: no story worktree was made here.
    assert not (sc.worktree_root / "ep" / "base").exists()
    order = [e["lane"] for e in events if e["type"] == "StoryMerged"]
    assert order.index("top") > max(order.index("left"), order.index("right")) > order.index("base")
    status = subprocess.run([*FLOWD, "status"], cwd=sc.repo, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and placed["top"] in status.stdout, status.stdout
    assert no_lane_actors_left(cluster)


THREE_TASKS = json.dumps(
    {"tasks": [{"title": f"step {n}", "description": f"Write {n}."} for n in ("one", "two", "three")]}
)


def test_a_killed_worker_is_placed_again_and_resumes_from_its_last_pushed_commit(
    tmp_path: Path, cluster: Cluster
) -> None:
    sc = on_ray(tmp_path, [story("long", ["long/"])], long_story_rules())
    process = spawn(sc, cluster, "--run-id", "k1")
    try:
        wait_for(process, '"TaskCompleted"')
        actors = cluster.node_pids("ray::LaneHost")
        assert actors, "the lane's actor process was not found on the cluster"
        for pid in actors:
            subprocess.run(["kill", "-9", str(pid)], check=True)
        assert process.wait(timeout=300) == 0, process.stderr.read().decode() if process.stderr else ""
    finally:
        kill_group(process)
    events = trace(sc, "k1")
    assert [e["lane"] for e in events if e["type"] == "LanePlaced"] == ["long", "long"]
    # Task 1 was pushed before the kill: the second placement did not do it again.
    firsts = [e for e in events if e["type"] == "TaskStarted" and e["lane"] == "long" and e["index"] == 1]
    assert len(firsts) == 1
    assert sc.merge_commits() == ["ep: merge story long"]
    assert {"long/one.txt", "long/two.txt", "long/three.txt"} <= set(sc.epic_files())
    assert no_lane_actors_left(cluster)


def test_a_killed_runner_leaves_no_actor_and_a_rerun_merges_nothing_twice(
    tmp_path: Path, cluster: Cluster
) -> None:
    sc = on_ray(tmp_path, DIAMOND, diamond_rules(delay=1500))
    process = spawn(sc, cluster, "--run-id", "first")
    try:
        wait_for(process, '"StoryMerged"')
    finally:
        kill_group(process)
    # The dead runner's actors end with it: nothing keeps working for a run that is gone.
    assert no_lane_actors_left(cluster)
    again = run(sc, cluster)
    # `--json` prints the trace's events: a failure's own sentence is in the failed story's.
    failed = [line for line in again.stdout.splitlines() if "failed" in line.lower()]
    assert again.returncode == 0, again.stderr + "\n".join(failed[-5:])
    assert sorted(sc.merge_commits()) == sorted(f"ep: merge story {s['id']}" for s in DIAMOND)
    states = [json.loads(p.read_text()) for p in (sc.repo / ".flow/epics/ep/stories").glob("*.json")]
    assert {s["status"] for s in states} == {"merged"}
    assert no_lane_actors_left(cluster)


# Green in a story worktree, red on the runner's epic worktree (`_epic`) until a/fixed.txt is there.
ON_EPIC = 'test "$(basename "$(pwd)")" != _epic'
NEEDS_FIX = (
    f"sh -c '{ON_EPIC} || test -f a/fixed.txt || {{ echo \"epic check: a/fixed.txt missing\"; exit 1; }}'"
)


def test_a_red_merge_of_a_ray_lane_is_revised_on_a_lane_placed_again(
    tmp_path: Path, cluster: Cluster
) -> None:
    fix = coder("a", {"a/fixed.txt": "fixed\n"})
    fix["when"]["prompt"] = "epic check: a/fixed.txt missing"  # the revision task carries the gate's output
    sc = on_ray(tmp_path, [story("a", ["a/"])], [fix, coder("a", {"a/x.txt": "x\n"})])
    config = sc.repo / ".flow" / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            'gates = ["test -f README.md"]', f"gates = [{json.dumps(NEEDS_FIX)}]"
        ),
        encoding="utf-8",
    )
    done = run(sc, cluster, "--run-id", "rv")
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert sc.merge_commits() == ["ep: merge story a"]  # the red merge was undone, not kept
    assert {"a/x.txt", "a/fixed.txt"} <= set(sc.epic_files())
    events = trace(sc, "rv")
    kinds = [e["type"] for e in events]
    assert kinds.count("MergeRolledBack") == 1 and kinds.count("MergeRevision") == 1
    assert kinds.count("LanePlaced") == 2  # the revision ran on a lane placed again
    assert kinds.index("MergeRolledBack") < kinds.index("MergeRevision") < kinds.index("StoryMerged")
    revision = next(e for e in events if e["type"] == "MergeRevision")
    assert (revision["lane"], revision["round"]) == ("a", 1) and "a/fixed.txt missing" in revision["output"]
    checkpoint = (sc.repo / ".flow/epics/ep/stories/a.plan.md").read_text(encoding="utf-8")
    assert "Revision 1: make the epic gates green after merging" in checkpoint
    assert no_lane_actors_left(cluster)


def test_red_forever_on_a_ray_lane_fails_after_its_merge_revision_rounds(
    tmp_path: Path, cluster: Cluster
) -> None:
    never = f"sh -c '{ON_EPIC} || {{ echo \"epic check: never green\"; exit 1; }}'"
    # Each revision must change something, or the task loop stops it first: a new line each time.
    revise = coder("a", run=["sh -c 'date +%s%N >> a/x.txt'"])
    revise["when"]["task"] = "Revision"
    sc = on_ray(tmp_path, [story("a", ["a/"])], [revise, coder("a", {"a/y.txt": "y\n"})])
    config = sc.repo / ".flow" / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            'gates = ["test -f README.md"]', f"gates = [{json.dumps(never)}]"
        ),
        encoding="utf-8",
    )
    done = run(sc, cluster, "--run-id", "rf")
    assert done.returncode == 1, done.stderr + done.stdout[-3000:]
    events = trace(sc, "rf")
    failed = [e for e in events if e["type"] == "StoryStatusChanged" and e["status"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["reason"].startswith(
        "epic gates failed after merging (after 1 merge revision); merge undone"
    )
    assert [e["type"] for e in events].count("MergeRevision") == 1
    assert sc.merge_commits() == []
    assert no_lane_actors_left(cluster)


def gated_on_the_cluster(sc: Scenario, gate: str, tmp_path: Path) -> None:
    """The scenario's epic gate is `gate`, candidates gated on the cluster; the gate may write
    its record under `tmp_path` (the node's confinement denies writes outside a lane)."""
    config = sc.repo / ".flow" / "config.toml"
    text = config.read_text(encoding="utf-8").replace(
        'gates = ["test -f README.md"]', f"gates = [{json.dumps(gate)}]"
    )
    text = text.replace("[lanes]\n", '[lanes]\ncandidateGates = "cluster"\n')
    config.write_text(text + f"\n[sandbox]\nallowWrite = [{json.dumps(str(tmp_path))}]\n", encoding="utf-8")


def test_candidate_gates_on_the_cluster_run_on_the_nodes_and_send_back_only_the_red_story(
    tmp_path: Path, cluster: Cluster
) -> None:
    """`candidateGates = "cluster"`: every candidate's epic gates ran in a node's lane cache, the
    red story went back with the node's gate output, the other merged once, no ref is left."""
    cwds = tmp_path / "gate-cwds.txt"
    gate = (
        f'sh -c \'test "$(basename "$(pwd)")" != _epic || pwd >> {cwds}; '
        f'{ON_EPIC} || test ! -f a/x.txt || test -f a/fixed.txt || {{ echo "epic check: a/fixed.txt missing"; exit 1; }}\''
    )
    fix = coder("a", {"a/fixed.txt": "fixed\n"})
    fix["when"]["prompt"] = "epic check: a/fixed.txt missing"
    stories = [story("a", ["a/"]), story("b", ["b/"])]
    sc = on_ray(tmp_path, stories, [fix, coder("a", {"a/x.txt": "x\n"}), coder("b", {"b/y.txt": "y\n"})])
    gated_on_the_cluster(sc, gate, tmp_path)
    done = run(sc, cluster, "--run-id", "cg")
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    events = trace(sc, "cg")
    revisions = [e for e in events if e["type"] == "MergeRevision"]
    assert [r["lane"] for r in revisions] == ["a"] and "a/fixed.txt missing" in revisions[0]["output"]
    on_nodes = [e["message"] for e in events if e["type"] == "Info" and "epic gates on node" in e["message"]]
    ran_here = [e["message"] for e in events if e["type"] == "Info" and "epic gates run here" in e["message"]]
    assert on_nodes and not ran_here, ran_here
    caches = [temp / "lanes" for temp in cluster.nodes.values()]
    ran = cwds.read_text(encoding="utf-8").split()
    assert ran and all(any(Path(cwd).is_relative_to(c) for c in caches) for cwd in ran), ran
    assert git(tmp_path / "remote.git", "for-each-ref", "refs/flowd/") == ""
    assert no_lane_actors_left(cluster)


def test_candidate_gates_run_on_the_runner_when_the_remote_refuses_the_candidate(
    tmp_path: Path, cluster: Cluster
) -> None:
    """A remote that takes branches but not flowd's candidate refs (a hook, as hosted remotes
    restrict namespaces): the train gates the candidate here, says why, and merges as before."""
    cwds = tmp_path / "gate-cwds.txt"
    gate = f'sh -c \'test "$(basename "$(pwd)")" != _epic || pwd >> {cwds}\''
    sc = on_ray(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"})])
    hook = tmp_path / "remote.git" / "hooks" / "pre-receive"
    hook.write_text('#!/bin/sh\nif grep -q " refs/flowd/"; then echo "refs/flowd/* is closed"; exit 1; fi\n')
    hook.chmod(0o755)
    gated_on_the_cluster(sc, gate, tmp_path)
    done = run(sc, cluster, "--run-id", "cr")
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert sc.merge_commits() == ["ep: merge story a"]
    said = [
        e["message"] for e in trace(sc, "cr") if e["type"] == "Info" and "epic gates run here" in e["message"]
    ]
    assert len(said) == 1 and "refused the candidate" in said[0], said
    ran = cwds.read_text(encoding="utf-8").split()
    assert ran and all(Path(cwd).is_relative_to(sc.worktree_root) for cwd in ran), ran
    assert no_lane_actors_left(cluster)
