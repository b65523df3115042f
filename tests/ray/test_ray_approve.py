"""Approve before merge with story lanes on a real local Ray cluster (docs/answers.md: `merge`,
docs/scale-out.md): the node pushes the finished story, the runner asks before its merge; changes
asked for go out on a lane placed again, which asks again; the approval merges it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.engine.scenario import FLOWD, coder, git, kill_group, story
from tests.engine.test_pause_run import Event, finish, read_until
from tests.ray.cluster import Cluster, driver_env
from tests.ray.test_ray_lanes import no_lane_actors_left, on_ray, spawn

SHOUT = {"when": {"role": "coder", "story": "a", "prompt": "shout it"}, "writes": {"a/x.txt": "X\n"}}


def answer(sc_repo: Path, cluster: Cluster, run_id: str, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FLOWD, "answer", run_id, "--story", "a", *words],
        cwd=sc_repo, env=driver_env(cluster.address), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_ray_lane_asks_on_the_runner_before_its_merge(tmp_path: Path, cluster: Cluster) -> None:
    sc = on_ray(tmp_path, [story("a", ["a/"])], [SHOUT, coder("a", {"a/x.txt": "x\n"})])
    process = spawn(sc, cluster, "--pause-on", "merge", "--run-id", "ra")
    seen: list[Event] = []
    try:
        asked = read_until(process, seen, "StoryPaused")
        assert (asked["lane"], asked["reason"]) == ("a", "merge")
        assert not any(e["type"] == "StoryMerged" for e in seen)
        back = answer(sc.repo, cluster, "ra", "shout it")
        assert back.returncode == 0, back.stderr
        read_until(process, seen, "StoryPaused")  # asked again after the revision
        ok = answer(sc.repo, cluster, "ra", "approve")
        assert ok.returncode == 0, ok.stderr
        assert finish(process, seen) == 0
    finally:
        kill_group(process)
    assert git(sc.repo, "show", "epic/ep:a/x.txt") == "X\n"
    assert sc.merge_commits() == ["ep: merge story a"]
    kinds = [e["type"] for e in seen]
    assert kinds.count("LanePlaced") == 3  # first, the revision, then the approved merge's lane
    statuses = [e["status"] for e in seen if e["type"] == "StoryStatusChanged" and e["story"] == "a"]
    assert statuses.count("ready") == 2 and statuses[-1] == "done"
    state = json.loads((sc.repo / ".flow/epics/ep/stories/a.json").read_text(encoding="utf-8"))
    assert state["approved"] == 2
    assert no_lane_actors_left(cluster)
