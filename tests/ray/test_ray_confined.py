"""A Ray lane is confined on its node as a local lane is (docs/sandbox.md "Ray lanes"): what its
agent tries past the lane's worktree is refused by the node's kernel, named as a `LaneEscape` in
the runner's trace and in the story's findings on the runner, and the story still merges."""

from __future__ import annotations

import subprocess
from pathlib import Path

from flowd.sandbox import landlock
from tests.engine.scenario import coder, git, story
from tests.ray.cluster import Cluster
from tests.ray.test_ray_lanes import no_lane_actors_left, on_ray, run, trace

COMMON = '"$(git rev-parse --git-common-dir)"'
# (the command, what the refusal is named as, the path it names, relative to the node's clone).
ATTEMPTS = [
    ("echo x > {R}/RAY-ABS.txt", "outside", "{R}/RAY-ABS.txt"),
    ("git config core.hooksPath /tmp/ray-hooks", "gitConfig", ".git/config"),
    (f"printf 'x' > {COMMON}/hooks/post-checkout", "gitHooks", ".git/hooks/post-checkout"),
    ("git update-ref refs/heads/main HEAD", "gitRef", ".git/refs/heads/main"),
    (f"printf 'gates = []' > {COMMON}/../.flow/config.toml", "flowState", ".flow/config.toml"),
]


def node_clones(cluster: Cluster) -> list[Path]:
    return [p.parent for p in cluster.root.glob("*/lanes/*/*/repo/.git")]


def test_a_ray_lanes_escapes_are_refused_on_its_node_and_named_on_the_runner(
    tmp_path: Path, cluster: Cluster
) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    repo = tmp_path / "repo"
    commands = [command.format(R=repo) for command, _, _ in ATTEMPTS]
    sc = on_ray(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"}, run=commands)])
    assert sc.repo == repo
    done = run(sc, cluster, "--run-id", "cf")
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    # Confinement leaves the agent, git and the gates working in the lane.
    assert sc.merge_commits() == ["ep: merge story a"]
    # 0 land: on the runner's machine and in every node's clone.
    assert not (repo / "RAY-ABS.txt").exists()
    clones = node_clones(cluster)
    assert clones, "no node clone found"
    for clone in clones:
        assert "ray-hooks" not in (clone / ".git" / "config").read_text(encoding="utf-8")
        assert not (clone / ".git" / "hooks" / "post-checkout").exists()
        main = subprocess.run(["git", "-C", str(clone), "rev-parse", "-q", "--verify", "refs/heads/main"],
                              capture_output=True, text=True).stdout.strip()  # fmt: skip
        assert main in ("", git(repo, "rev-parse", "main")), clone
    # Each refusal named on the runner: in its trace and in the story's findings there.
    escapes = [e for e in trace(sc, "cf") if e["type"] == "LaneEscape"]
    assert escapes and all((e["lane"], e["action"]) == ("a", "denied") for e in escapes), escapes
    findings = (repo / ".flow" / "epics" / "ep" / "stories" / "a.findings.md").read_text(encoding="utf-8")
    assert findings.startswith("# Findings: a\n") and findings.count("# Findings") == 1
    missing = []
    for _, what, path in ATTEMPTS:
        path = path.format(R=repo)
        seen = [e for e in escapes if e["path"].endswith(path) and e["what"] == what]
        if not seen or f"`{seen[0]['path']}` ({what})" not in findings:
            missing.append(f"{what}: {path}")
    assert missing == [], f"{escapes}\n{findings}"
    assert "not confined" not in done.stdout
    assert no_lane_actors_left(cluster)


def test_on_a_node_that_does_not_enforce_a_lane_is_checked_after_each_step(
    tmp_path: Path, cluster: Cluster
) -> None:
    """`detect` on the node: said on the placement; a write to the node clone's shared config is
    put back there and fails the story that made it, on the runner (docs/sandbox-detection.md)."""
    evil = coder("a", {"a/x.txt": "x\n"}, run=["git config core.hooksPath /tmp/ray-evil-hooks"])
    sc = on_ray(tmp_path, [story("a", ["a/"]), story("b", ["b/"])], [evil, coder("b", {"b/y.txt": "y\n"})])
    config = sc.repo / ".flow" / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + '\n[sandbox]\nmode = "detect"\n', encoding="utf-8")
    done = run(sc, cluster, "--run-id", "dt")
    assert done.returncode != 0, done.stdout[-3000:]
    events = trace(sc, "dt")
    said = [e["message"] for e in events if e["type"] == "Info" and e.get("lane") == "a"]
    assert any(m.startswith("sandbox: this lane runs on ") and "not confined" in m for m in said), said
    escapes = [(e["lane"], e["path"].rsplit("/repo/", 1)[-1], e["what"], e["action"])
               for e in events if e["type"] == "LaneEscape"]  # fmt: skip
    assert escapes == [("a", ".git/config", "gitConfig", "undone")], escapes
    status = {e["story"]: e for e in events if e["type"] == "StoryStatusChanged"}
    assert status["a"]["status"] == "failed" and "wrote past its lane" in status["a"]["reason"]
    assert status["b"]["status"] == "done"  # blame goes to the lane that did it, never another
    for clone in node_clones(cluster):
        assert "ray-evil-hooks" not in (clone / ".git" / "config").read_text(encoding="utf-8")
    assert no_lane_actors_left(cluster)
