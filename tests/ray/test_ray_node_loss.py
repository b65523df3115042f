"""A whole worker node dies mid-story (docs/scale-out.md: faults): its lane is placed again on the
other node and resumes from its last pushed commit.

A cluster of its own: a head without CPUs (so it gets no lanes, as Ray advises for a big cluster)
and two workers, so either worker can die and the cluster lives on. The node is killed as a
machine would die: every process of its session (raylet, workers, the lane's host) at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.scenario import kill_group, story
from tests.ray.cluster import Cluster, start_cluster
from tests.ray.test_ray_lanes import long_story_rules, no_lane_actors_left, on_ray, spawn, trace, wait_for

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def two_workers() -> Iterator[Cluster]:
    running = start_cluster(head_cpus=0, workers=2)
    try:
        yield running
    finally:
        running.stop()


def test_a_dead_node_is_left_and_its_lane_resumes_on_the_other_from_its_last_pushed_commit(
    tmp_path: Path, two_workers: Cluster
) -> None:
    cluster = two_workers
    sc = on_ray(tmp_path, [story("long", ["long/"])], long_story_rules())
    process = spawn(sc, cluster, "--run-id", "n1")
    try:
        wait_for(process, '"TaskCompleted"')
        placed = next(e["node"] for e in trace(sc, "n1") if e["type"] == "LanePlaced")
        doomed = cluster.node_named(placed)
        assert doomed != "head", "a head without CPUs got a lane"
        cluster.kill_node(doomed)
        assert process.wait(timeout=300) == 0, process.stderr.read().decode() if process.stderr else ""
    finally:
        kill_group(process)
    events = trace(sc, "n1")
    nodes = [e["node"] for e in events if e["type"] == "LanePlaced"]
    assert len(nodes) == 2 and nodes[0] != nodes[1], nodes
    assert cluster.node_named(nodes[1]) not in (doomed, "head")
    lost = [e["message"] for e in events if e["type"] == "Info" and "lane lost" in e["message"]]
    assert len(lost) == 1, lost
    # Task 1 was pushed before the node died: the second placement went on from there.
    firsts = [e for e in events if e["type"] == "TaskStarted" and e["lane"] == "long" and e["index"] == 1]
    assert len(firsts) == 1
    assert any("resuming at task" in e["message"] for e in events if e["type"] == "Info")
    assert sc.merge_commits() == ["ep: merge story long"]
    assert {"long/one.txt", "long/two.txt", "long/three.txt"} <= set(sc.epic_files())
    state = json.loads((sc.repo / ".flow/epics/ep/stories/long.json").read_text(encoding="utf-8"))
    assert state["status"] == "merged"
    assert no_lane_actors_left(cluster)
