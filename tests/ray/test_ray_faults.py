"""Faults of lanes on Ray (docs/scale-out.md): each is one sentence and the run halts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.scenario import coder, story
from tests.ray.cluster import Cluster, free_port
from tests.ray.test_ray_lanes import on_ray, run

pytestmark = pytest.mark.timeout(600)

ONE = [story("one", ["one.txt"])]
RULES = [coder("one", {"one.txt": "1\n"})]


def test_an_unreachable_cluster_halts_the_run_in_one_sentence(tmp_path: Path) -> None:
    sc = on_ray(tmp_path, ONE, RULES)
    config = sc.repo / ".flow" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + f'address = "127.0.0.1:{free_port()}"\n')
    cluster = Cluster(tmp_path, address=f"127.0.0.1:{free_port()}")
    done = run(sc, cluster)
    assert done.returncode == 3, done.stderr
    assert "could not reach the Ray cluster at '127.0.0.1:" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert sc.merge_commits() == []


def test_a_remote_refusing_the_push_halts_the_run(tmp_path: Path, cluster: Cluster) -> None:
    sc = on_ray(tmp_path, ONE, RULES)
    hook = tmp_path / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    done = run(sc, cluster)
    assert done.returncode == 3, done.stderr
    assert "refused the push of epic/ep" in done.stdout
    assert "Traceback" not in done.stderr
    assert sc.merge_commits() == []


def test_a_node_without_the_agent_program_is_one_sentence_by_the_roster_rules(
    tmp_path: Path, cluster: Cluster
) -> None:
    sc = on_ray(tmp_path, ONE, RULES)
    sc.executors = [{"id": "ghost", "kind": "acp", "command": ["flowd-no-such-agent"], "slots": 1}]
    sc.write_roster()
    done = run(sc, cluster)
    # As on one machine (docs/roster.md): excluded, tried again after its back-off, then the story
    # fails naming the program; the run ends failed.
    assert done.returncode == 1, done.stderr + done.stdout[-3000:]
    failed = [json.loads(line)["event"] for line in done.stdout.splitlines() if '"failed"' in line]
    assert any(
        "cannot start flowd-no-such-agent: not found on PATH" in (e.get("reason") or "") for e in failed
    )
    assert done.stderr == ""
    assert sc.merge_commits() == []
