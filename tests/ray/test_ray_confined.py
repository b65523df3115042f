"""A Ray lane is confined on its node as a local lane is (docs/sandbox.md "Ray lanes"): what its
agent tries past the lane's worktree is refused by the node's kernel, named as a `LaneEscape` in
the runner's trace and in the story's findings on the runner, and the story still merges."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from flowd.engine.lanes.node import lane_cache
from flowd.sandbox import landlock
from tests.engine.scenario import Scenario, coder, git, story
from tests.ray.cluster import Cluster
from tests.ray.test_ray_lanes import gated_on_the_cluster, no_lane_actors_left, on_ray, run, trace
from tests.sandbox.test_escape_campaign import Listener, _processes_sleeping, kill_strays, stay_name

# The node clone's git dir: the lane's own git works in its lane repository, which lies in its
# worktree's admin dir, `<clone>/.git/worktrees/<id>/flowd-git` (docs/sandbox.md "The lane
# repository"), so a plain `git config` would write only that; these aim at the clone's own.
COMMON = '"$(cd "$(git rev-parse --git-common-dir)/../../.." && pwd)"'
# (the command, what the refusal is named as, the path it names, relative to the node's clone).
ATTEMPTS = [
    ("echo x > {R}/RAY-ABS.txt", "outside", "{R}/RAY-ABS.txt"),
    (f"git --git-dir={COMMON} config core.hooksPath /tmp/ray-hooks", "gitConfig", ".git/config"),
    (f"printf 'x' > {COMMON}/hooks/post-checkout", "gitHooks", ".git/hooks/post-checkout"),
    (
        f'GIT_DIR={COMMON} git update-ref refs/heads/main "$(git rev-parse HEAD)"',
        "gitRef",
        ".git/refs/heads/main",
    ),
    (f"printf 'gates = []' > {COMMON}/../.flow/config.toml", "flowState", ".flow/config.toml"),
]


def node_clones(cluster: Cluster, sc: Scenario) -> list[Path]:
    """The nodes' clones of this test's remote (the cluster is shared: other tests' clones, a
    killed driver's among them, are not this test's to judge)."""
    key = lane_cache("node", str(sc.repo.parent / "remote.git")).name
    clones = [p.parent for p in cluster.root.glob(f"*/lanes/*/{key}/repo/.git")]
    assert clones, f"no node cloned {sc.repo.parent / 'remote.git'} (looked for */lanes/*/{key}/repo)"
    return clones


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
    clones = node_clones(cluster, sc)
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
    for clone in node_clones(cluster, sc):
        assert "ray-evil-hooks" not in (clone / ".git" / "config").read_text(encoding="utf-8")
    assert no_lane_actors_left(cluster)


# The sealed campaign (docs/sandbox.md "The escape campaign") from a Ray node's lane: what flowd's
# node, unconfined, does with what the lane wrote into the node's clone. `{U}` holds the user's
# files the test owns (never the machine's real ones), `{P}` the proof folder no lane may write.
ADMIN = '"$(git rev-parse --absolute-git-dir)"'
SEALED_ON_A_NODE = [
    ("delete the node clone's packs", f"rm -f {COMMON}/objects/pack/*.pack"),
    ("objects/info/alternates", f"echo /tmp >> {COMMON}/objects/info/alternates"),
    ("SIGTERM the user's editor", "kill -TERM {EDITOR}"),
    ("an abstract unix socket of the user's",
     "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{ABSTRACT}'); s.sendall(b'ray')\""),
    ("a unix socket file of the user's",
     "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{SOCK}'); s.sendall(b'ray')\""),
    ("outlive the lane", "(cd / && exec env -u FLOWD_LANE setsid sleep {STAY} > /dev/null 2>&1 &)"),
    ("COMMIT_EDITMSG linked to a file of the user's", f"ln -sf {{U}}/bashrc {ADMIN}/COMMIT_EDITMSG"),
    ("logs/HEAD linked to a file of the user's", f"rm -f {ADMIN}/logs/HEAD; ln -s {{U}}/reflog {ADMIN}/logs/HEAD"),
    # The node pushes the lane's branch: the remote's receive-pack (and upload-pack) are commands too.
    ("core.fsmonitor and remote.origin.receivepack through a fake common dir",
     f"F=$TMPDIR/evil-common; mkdir -p $F/objects/info; cp -r {COMMON}/refs $F/; "
     f"cp {COMMON}/packed-refs $F/ 2>/dev/null; echo {COMMON}/objects > $F/objects/info/alternates; "
     "printf '#!/bin/sh\\ntouch {P}/ray-fsmonitor\\nexit 1\\n' > $F/fsmon; chmod +x $F/fsmon; "
     "printf '#!/bin/sh\\ntouch {P}/ray-receivepack\\nexec git-receive-pack \"$@\"\\n' > $F/rp; chmod +x $F/rp; "
     "printf '#!/bin/sh\\ntouch {P}/ray-uploadpack\\nexec git-upload-pack \"$@\"\\n' > $F/up; chmod +x $F/up; "
     "printf '[core]\\n\\tfsmonitor = %s\\n[remote \"origin\"]\\n\\turl = %s\\n\\treceivepack = %s\\n"
     "\\tuploadpack = %s\\n' $F/fsmon \"$(git config remote.origin.url)\" $F/rp $F/up > $F/config; "
     f"echo 'ref: refs/heads/main' > $F/HEAD; echo $F > {ADMIN}/commondir"),
    ("HEAD pointing at the node clone's main", f"echo 'ref: refs/heads/main' > {ADMIN}/HEAD"),
]  # fmt: skip


STAY = stay_name(86409)  # the would-be stray's `sleep`: unique to this test process


def test_a_ray_lanes_sealed_techniques_do_not_land_on_its_node(tmp_path: Path, cluster: Cluster) -> None:
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    proof, user = tmp_path / "proof", tmp_path / "user"
    proof.mkdir()
    user.mkdir()
    for name in ("bashrc", "reflog"):
        (user / name).write_text(f"the user's {name}\n", encoding="utf-8")
    editor = subprocess.Popen(["sleep", "600"], cwd=tmp_path, start_new_session=True)
    abstract = Listener(f"\0campaign-ray-{os.getpid()}-{tmp_path.name}")
    agent_dir = Path(tempfile.mkdtemp(prefix="ssh-", dir="/tmp"))  # where ssh-agent makes its socket
    sock = Listener(str(agent_dir / "agent.1"))
    try:
        places = {"P": str(proof), "U": str(user), "EDITOR": str(editor.pid), "STAY": STAY,
                  "ABSTRACT": abstract.sock.getsockname()[1:].decode(), "SOCK": str(agent_dir / "agent.1")}  # fmt: skip
        commands = [f"{{ {command.format(**places)} ; }} 2>&1 || true" for _, command in SEALED_ON_A_NODE]
        sc = on_ray(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"}, run=commands)])
        done = run(sc, cluster, "--run-id", "se")
        landed = []
        if editor.poll() is not None:
            landed.append(f"SIGTERM the user's editor: it died ({editor.returncode})")
        if abstract.heard or sock.heard:
            landed.append(f"the user's sockets were connected to: {abstract.heard} {sock.heard}")
        if _processes_sleeping(STAY):
            landed.append("a process of the lane outlived the run")
        landed += [f"a driver ran outside the lane: {p}" for p in glob.glob(str(proof / "*"))]
        for name in ("bashrc", "reflog"):
            if (user / name).read_text(encoding="utf-8") != f"the user's {name}\n":
                landed.append(f"{user / name} was written through a link")
        for clone in node_clones(cluster, sc):
            if (clone / ".git" / "objects" / "info" / "alternates").exists():
                landed.append(f"{clone}: objects/info/alternates was written")
            fsck = subprocess.run(
                ["git", "fsck", "--full", "--no-dangling"], cwd=clone, capture_output=True, text=True
            )
            if fsck.returncode != 0:
                landed.append(f"{clone}: git fsck --full: {fsck.stdout}{fsck.stderr}")
        fsck = subprocess.run(
            ["git", "fsck", "--full", "--no-dangling"], cwd=sc.repo, capture_output=True, text=True
        )
        if fsck.returncode != 0:
            landed.append(f"the user's repository: git fsck --full: {fsck.stdout}{fsck.stderr}")
        assert landed == [], "\n".join(landed) + "\n" + done.stdout[-3000:]
        # The run ends: the story merges, or fails for what it wrote past its lane (put back and
        # reported: a write into its own git admin files cannot be refused by the OS); nothing of
        # the node's clone reached the user's `main`.
        ended = [e for e in trace(sc, "se") if e["type"] == "StoryStatusChanged" and e["story"] == "a"][-1]
        merged = ended["status"] in ("done", "merged")
        assert merged or "wrote past its lane" in ended.get("reason", ""), ended
        assert sc.merge_commits() == (["ep: merge story a"] if merged else [])
        assert git(sc.repo, "log", "--format=%s", "main").split("\n")[0] == "init"
        assert no_lane_actors_left(cluster)
    finally:
        editor.kill()
        editor.wait()
        abstract.close()
        sock.close()
        shutil.rmtree(agent_dir)
        kill_strays([STAY])


# A merge candidate's epic gate on a node (`candidateGates = "cluster"`): it commits in the
# candidate (an object in the slot's quarantine, its detached HEAD moved there), then points the
# slot's `commondir` at a fake common dir whose config names an fsmonitor and its `.git` file at a
# fake admin dir. `@LOG@` records the commit, `@PROOF@` is what the fsmonitor would make.
CANDIDATE_GATE = r"""#!/bin/sh
case "$PWD" in */_train/*) ;; *) exit 0 ;; esac
ADMIN="$(git rev-parse --absolute-git-dir)"
COMMON="$(git rev-parse --path-format=absolute --git-common-dir)"
echo evil > evil.txt && git add evil.txt && git commit -q -m evil && git rev-parse HEAD >> @LOG@
F="$TMPDIR/evil-common"; mkdir -p "$F/objects/info"; cp -r "$COMMON/refs" "$F/"
echo "$COMMON/objects" > "$F/objects/info/alternates"
printf '#!/bin/sh\ntouch @PROOF@\nexit 1\n' > "$F/fsmon"; chmod +x "$F/fsmon"
printf '[core]\n\tfsmonitor = %s\n' "$F/fsmon" > "$F/config"; echo 'ref: refs/heads/main' > "$F/HEAD"
echo "$F" > "$ADMIN/commondir"
G="$TMPDIR/evil-admin"; mkdir -p "$G"; echo "$COMMON" > "$G/commondir"
echo 'ref: refs/heads/main' > "$G/HEAD"; echo "$PWD/.git" > "$G/gitdir"; echo "gitdir: $G" > .git
exit 0
"""


def test_what_a_candidates_gate_writes_in_its_node_slot_is_put_back_and_reported_on_the_runner(
    tmp_path: Path, cluster: Cluster
) -> None:
    """The node checks its candidate slot after the gates as the runner checks its own
    (docs/scale-out.md): `.git` and `HEAD` put back, the gate's objects thrown away,
    each reported in the runner's trace as the story's escape; the node's clone stays whole."""
    assert landlock.abi() >= 2, "this test needs the kernel's Landlock (Linux 5.19+)"
    log, proof = tmp_path / "gate-log", tmp_path / "proof" / "fsmonitor-ran"
    proof.parent.mkdir()
    script = tmp_path / "candidate-gate.sh"
    script.write_text(
        CANDIDATE_GATE.replace("@LOG@", str(log)).replace("@PROOF@", str(proof)), encoding="utf-8"
    )
    sc = on_ray(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"})])
    gated_on_the_cluster(sc, f"sh {script}", tmp_path)
    done = run(sc, cluster, "--run-id", "cn")
    assert done.returncode == 0, done.stderr + done.stdout[-3000:]
    assert sc.merge_commits() == ["ep: merge story a"]
    events = trace(sc, "cn")
    assert any(e["type"] == "Info" and "epic gates on node" in e["message"] for e in events)
    escapes = sorted(
        (e["lane"], e["what"], e["action"], Path(e["path"]).name) for e in events if e["type"] == "LaneEscape"
    )
    # The gate's `commondir` lands in the candidate's lane repository, its own git's business
    # (docs/sandbox.md "The lane repository"): flowd never reads it, so there is nothing to put back.
    assert escapes == [("a", "gitDir", "undone", ".git"), ("a", "gitObjects", "undone", "HEAD")], escapes
    assert not proof.exists(), "flowd's git on the node followed the candidate's commondir"
    commit = log.read_text(encoding="utf-8").split()[0]
    for clone in node_clones(cluster, sc):
        fsck = subprocess.run(
            ["git", "fsck", "--full", "--no-dangling"], cwd=clone, capture_output=True, text=True
        )
        assert fsck.returncode == 0, f"{clone}: {fsck.stdout}{fsck.stderr}"
        assert subprocess.run(["git", "cat-file", "-e", commit], cwd=clone).returncode != 0
        for slot in clone.parent.glob("wt/*/_train/*/_epic"):
            assert (slot / ".git").read_text(encoding="utf-8").startswith(f"gitdir: {clone}/.git/worktrees/")
    assert subprocess.run(["git", "cat-file", "-e", commit], cwd=sc.repo).returncode != 0
    assert no_lane_actors_left(cluster)
