"""The escape campaign (docs/sandbox.md "The escape campaign"): a real run on this machine's
kernel, whose attacker story tries every technique of tests/sandbox/campaign.py from its coder's
turn (the scripted agent's shell commands) and from its task gate, while a victim story works
beside it. Under `enforce` nothing lands, every refusal is named in the attacker's findings and
as a `LaneEscape` `denied`, the victim is never blamed, and both stories still finish."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from flowd.events.model import LaneEscape, StoryStatusChanged
from flowd.sandbox import landlock
from tests.engine.scenario import Scenario, coder, git, story
from tests.sandbox import victim_lane
from tests.sandbox.campaign import (
    ALL_SEALED,
    HANDED_ON,
    NEXT_TECHNIQUES,
    ORIGINS,
    OWNS,
    SECRET,
    TECHNIQUES,
    Technique,
    fill,
    write_scripts,
    write_sealed_scripts,
)


def _home(root: Path) -> Path:
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n", encoding="utf-8")
    (home / ".bashrc").write_text("# the user's shell\n", encoding="utf-8")
    (home / ".gitconfig").write_text("[user]\n\tname = user\n\temail = user@example.com\n", encoding="utf-8")
    return home


def _snapshot(paths: list[Path]) -> dict[Path, bytes | None]:
    return {p: p.read_bytes() if p.is_file() else None for p in paths}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_no_technique_lands_from_an_agent_turn_or_a_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert landlock.abi() >= 1, "this test needs the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    home = _home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    repo, lanes = tmp_path / "repo", tmp_path / "repo.flowd" / "ep"
    places = {
        "R": str(repo), "C": str(repo / ".git"), "H": str(home), "B": str(lanes / "b"),
        "E": str(lanes / "_epic"), "A": str(lanes / "a"), "UP": "../../../repo",
    }  # fmt: skip
    scripts = write_scripts(tmp_path, places)
    findings_a = repo / ".flow" / "epics" / "ep" / "stories" / "a.findings.md"
    # The victim keeps its worktree (and its admin dir) until the attacker's gate has been refused there.
    wait_for_gate = (
        f"for i in $(seq 1200); do grep -q INTRUDER-gate {findings_a} 2>/dev/null && break; sleep 0.1; done"
    )
    rules = [
        coder("a", {"evil/a.txt": "a\n"}, run=[f"sh {scripts['agent']}"]),
        coder("b", {"b.txt": "b\n"}, run=[wait_for_gate]),
    ]
    sc = Scenario.create(
        tmp_path,
        [story("a", ["evil/"]), story("b", ["b.txt"])],
        rules,
        settings=f'gates = ["sh {scripts["gate"]}"]\njudgeRounds = 0\ngateRetries = 0\n',
    )
    git(repo, "checkout", "-q", "-b", "work")  # `main` is free to move, were a lane able to
    flow = repo / ".flow"
    watched = [flow / "config.toml", flow / "roster.toml", repo / ".git" / "config", home / ".bashrc",
               home / ".gitconfig", repo / "README.md"]  # fmt: skip
    before = _snapshot(watched)
    main_before = git(repo, "rev-parse", "main")

    result = sc.run()

    # Both stories finish: confinement leaves git, the agent and the gates working in the lane.
    assert result.outcome == "done", result.view
    # 0 land.
    assert _snapshot(watched) == before
    assert git(repo, "rev-parse", "main") == main_before
    branches = git(repo, "branch", "--format=%(refname:short)").split()
    assert sorted(branches) == ["epic/ep", "main", "story/ep/a", "story/ep/b", "work"]
    assert "evil" not in git(repo, "log", "--format=%s", "--all")
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert "evil" not in (repo / ".git" / "info" / "exclude").read_text(encoding="utf-8")  # flowd adds .flow/
    leftovers = [
        p.name for p in repo.iterdir() if p.name not in (".git", ".flow", "README.md", "ep.epic.json")
    ]
    assert leftovers == []
    # flowd's own binder cache (flowd/sandbox/bind.py) is the one new entry of $HOME.
    assert sorted(p.name for p in home.iterdir()) in (
        [".bashrc", ".gitconfig", ".ssh"],
        [".bashrc", ".cache", ".gitconfig", ".ssh"],
    )
    assert (
        [p.name for p in (home / ".cache").iterdir()] in ([], ["flowd"])
        if (home / ".cache").exists()
        else True
    )
    assert not list(tmp_path.glob("repo.flowd/ep/_epic/INTRUDER-*"))
    trace = next((flow / "runs").glob("*/trace.jsonl")).read_text(encoding="utf-8")
    assert "\nevil\n" not in trace
    state = flow / "roster-state.json"
    assert not state.exists() or state.read_text(encoding="utf-8") != "{}\n"
    every_commit = subprocess.run(
        ["git", "log", "--all", "-p"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert SECRET not in every_commit
    # Each refusal named in the attacker's findings, by who tried it, and as a LaneEscape.
    lines = findings_a.read_text(encoding="utf-8").splitlines()
    escapes = [e.event for e in sc.events(result.run_id) if e.event.type == "LaneEscape"]
    assert escapes and all(e.lane == "a" and e.action == "denied" for e in escapes)  # type: ignore[union-attr]
    named = {e.path for e in escapes}  # type: ignore[union-attr]
    missing = []
    for tag, by in (("agent", "its agent"), ("gate", f"`sh {scripts['gate']}`")):
        for name, _, expected in TECHNIQUES:
            path = fill(expected, places, tag)
            if not any(path in line and by in line for line in lines) or not any(path in p for p in named):
                missing.append(f"{tag}: {name} ({path})")
    assert missing == [], "\n".join(lines)
    assert len(TECHNIQUES) >= 25
    # The victim is never blamed.
    b_findings = repo / ".flow" / "epics" / "ep" / "stories" / "b.findings.md"
    assert not b_findings.exists() or "Confinement" not in b_findings.read_text(encoding="utf-8")


# The sealed campaign (tests/sandbox/campaign.py SEALED and PLANTED): four attacker stories, one per
# origin (`ag` its agent's turn, `gt` its task gate, `su` its setup command, `ea` whose merge
# train candidate's epic gate runs it), and the victim `b`, against the user's repository with an
# unpushed branch, a tag, a stash, reflogs, a pack, a dangling object and a staged file, and the
# user's processes and sockets.
RUNNER_SIGNALS = {"agent": 35, "gate": 36, "setup": 37, "epic": 38}  # SIGRTMIN+1..4
VICTIM_SIGNALS = {"agent": "USR1", "gate": "USR2", "setup": "HUP", "epic": "ALRM"}


def stay_name(base: int, pid: int | None = None) -> str:
    """A `sleep` argument unique to the test process `pid` (this one: `STAY`): `<base>.<pid>` seconds."""
    return f"{base}.{os.getpid() if pid is None else pid}"


def kill_strays(names: Iterable[str]) -> None:
    """Kill what outlived its lane: the processes sleeping one of `names` (this copy's, `STAY`)."""
    for seconds in names:
        for pid in _processes_sleeping(seconds):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# How long each origin's would-be stray sleeps: its name, unique to this copy of the test (the
# test process's pid as the fraction), so a copy running beside it never finds or kills this
# copy's strays, nor this copy another's (`_processes_sleeping`).
STAY = {tag: stay_name(86400 + n) for n, tag in enumerate(("agent", "gate", "setup", "epic"), start=1)}
RUNNER_SECRET = "RUNNER-ENV-SECRET-5c1e07"


class Listener:
    """A unix socket of the user's (a file, or abstract when `address` starts with NUL) that
    records every connection made to it."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(address)
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.heard: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.heard.append(conn.recv(64) or b"(connected)")
                except OSError:
                    self.heard.append(b"(connected)")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _user_repo(repo: Path, root: Path) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The user's history beside the plan: a branch `release` and its annotated tag `v1` whose
    objects are only in a pack (the tag packed in `packed-refs`), an unpushed branch `wip` in
    loose objects, a stash, dangling blobs, a staged file and an untracked one; `work` checked
    out (so `main` is free to move, were a lane able to). Each origin aims at objects of its own
    (a commit, blob and tree of `wip`, a packed blob, a dangling blob), so what lands is told
    apart; the places shared by all, and each origin's."""

    def obj(rev: str) -> str:
        sha = git(repo, "rev-parse", rev).strip()
        return f"objects/{sha[:2]}/{sha[2:]}"

    git(repo, "config", "extensions.worktreeConfig", "true")  # as sparse worktrees set it
    # An ignored file each new worktree gets a copy of (docs/worktree-bootstrap.md).
    (repo / ".gitignore").write_text(".env\n", encoding="utf-8")
    (repo / ".worktreeinclude").write_text(".env\n", encoding="utf-8")
    (repo / ".env").write_text("USER_SETTING=1\n", encoding="utf-8")
    git(repo, "add", ".gitignore", ".worktreeinclude")
    git(repo, "commit", "-q", "-m", "ignore .env, copied into worktrees")
    git(repo, "checkout", "-q", "-b", "release")
    for tag in ORIGINS:
        (repo / f"rel-{tag}.txt").write_text(f"released {tag}\n", encoding="utf-8")
    git(repo, "add", *(f"rel-{tag}.txt" for tag in ORIGINS))
    git(repo, "commit", "-q", "-m", "release")
    git(repo, "tag", "-a", "v1", "-m", "release 1")
    git(repo, "checkout", "-q", "main")
    only_release = git(repo, "rev-list", "--objects", "v1", "--not", "main")
    ids = "\n".join(
        [line.split()[0] for line in only_release.splitlines()] + [git(repo, "rev-parse", "v1").strip()]
    )
    subprocess.run(["git", "pack-objects", "-q", ".git/objects/pack/pack"], cwd=repo, input=ids + "\n",
                   capture_output=True, text=True, check=True)  # fmt: skip
    git(repo, "prune-packed")
    git(repo, "pack-refs")
    git(repo, "checkout", "-q", "-b", "wip")
    for tag in ORIGINS:
        (repo / f"wip-{tag}.txt").write_text(f"the user's unpushed work, {tag}\n", encoding="utf-8")
        git(repo, "add", f"wip-{tag}.txt")
        git(repo, "commit", "-q", "-m", f"unpushed {tag}")
    own = {
        tag: {"OBJ": obj(f"wip~{3 - n}"), "BLOB": obj(f"wip:wip-{tag}.txt"), "TREE": obj(f"wip~{3 - n}^{{tree}}"),
              "PACKED": obj(f"release:rel-{tag}.txt")}
        for n, tag in enumerate(ORIGINS)
    }  # fmt: skip
    git(repo, "checkout", "-q", "main")
    (repo / "README.md").write_text("# sample, being edited\n", encoding="utf-8")
    git(repo, "stash", "-q")
    git(repo, "checkout", "-q", "-b", "work")
    for tag in ORIGINS:
        sha = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=f"lost and found {tag}\n",
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        own[tag]["DANGLING"] = f"objects/{sha[:2]}/{sha[2:]}"
    (repo / "staged.txt").write_text("USER-STAGED-CONTENT\n", encoding="utf-8")
    git(repo, "add", "staged.txt")
    (repo / "notes.txt").write_text("the user's notes, not in git\n", encoding="utf-8")
    projects = root / "user" / "projects"
    for name in ("thesis", "photos"):
        (projects / name).mkdir(parents=True)
        (projects / name / "keep.txt").write_text(f"the user's {name}\n", encoding="utf-8")
    precious = root / "user" / "worktrees" / "keep"
    precious.mkdir(parents=True)
    (precious / "thesis.txt").write_text("the user's, in a folder named worktrees/\n", encoding="utf-8")
    shared = {
        "WIP": git(repo, "rev-parse", "wip").strip(),
        "PRECIOUS": str(precious),
        "PROJECTS": str(projects),
    }
    return shared, own


def _user_refs(repo: Path) -> dict[str, bytes]:
    """Every ref of the user's (not flowd's story and epic branches) with its value, and every
    reflog of the user's, byte for byte."""
    common = repo / ".git"
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    found = {line.split()[0]: line.encode() for line in refs if not _flowds(line.split()[0])}
    for log in (common / "logs").rglob("*"):
        name = str(log.relative_to(common / "logs"))
        if log.is_file() and not _flowds(name):
            found[f"logs/{name}"] = log.read_bytes()
    found["stash list"] = git(repo, "stash", "list", "--format=%H %gs").encode()
    return found


def _flowds(ref: str) -> bool:
    return ref.startswith(("refs/heads/story/", "refs/heads/epic/", "refs/flowd/"))


def _files(pattern: str) -> dict[str, bytes]:
    return {p: Path(p).read_bytes() for p in sorted(glob.glob(pattern)) if Path(p).is_file()}


def _processes_sleeping(seconds: str) -> list[int]:
    """The processes whose command line is exactly `sleep <seconds>`: `seconds` names them, so a
    caller passes one only its own attackers use (`STAY`, `stay_name`)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == f"sleep\0{seconds}\0".encode():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _run_text(repo: Path, lanes: Path, home: Path) -> Iterator[bytes]:
    """Everything the run left: every commit's patch, and the files of `.flow/`, the lanes, `$HOME`."""
    yield subprocess.run(["git", "log", "--all", "-p"], cwd=repo, capture_output=True).stdout
    for root in (repo / ".flow", lanes, home):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    yield path.read_bytes()
                except OSError:
                    continue


def _victim_lane_rule(lanes: Path) -> dict[str, object]:
    states = lanes.parent.parent / "repo" / ".flow" / "epics" / "ep" / "stories"
    marks = [f"{lanes / sid / sid / f'done-{tag}'}|{states / f'{sid}.json'}"
             for tag, sid in ORIGINS.items() if tag != "epic"]  # fmt: skip
    marks.append(
        f"{lanes / 'gx' / 'gx' / 'done'}|{states / 'gx.json'}"
    )  # its gate has tried the victim's admin dir
    # Its shell ignores the signals; the victim's own process (named in its command line) records them.
    wait = (f"trap '' USR1 USR2 HUP ALRM; {sys.executable} {victim_lane.__file__} campaign-victim-lane "
            + " ".join(f"'{m}'" for m in marks))  # fmt: skip
    return coder("b", {"b/b.txt": "b\n"}, run=[wait])


class Proofs:
    """What the test holds before the run, to say afterwards which technique landed."""

    def __init__(self, places: dict[str, dict[str, str]]) -> None:
        self.places = places
        self.before: dict[tuple[str, str, str], dict[str, bytes]] = {}
        for tag, where in places.items():
            for t in [*ALL_SEALED, *NEXT_TECHNIQUES.values()]:
                for proof in t.proof.split("|"):
                    kind, _, arg = proof.partition(":")
                    if kind in ("same", "none"):
                        self.before[(tag, t.name, proof)] = _files(fill(arg, where, tag))

    def shared(self, t: Technique) -> bool:
        """Whether every origin aims `t` at the same target (a pack, `packed-refs`, a reflog)."""
        if t.proof in ("victim", "fsck"):
            return True
        if any(p.partition(":")[0] not in ("same", "none", "string") for p in t.proof.split("|")):
            return False
        return len({fill(t.proof, where, tag) for tag, where in self.places.items()}) == 1

    def landed(self, tag: str, t: Technique, seen: dict[str, object]) -> str | None:
        """Why `t` tried from `tag` landed, or None."""
        whys = [why for proof in t.proof.split("|") if (why := self._landed(tag, t, proof, seen)) is not None]
        return "; ".join(whys) or None

    def _landed(self, tag: str, t: Technique, proof: str, seen: dict[str, object]) -> str | None:
        kind, _, arg = proof.partition(":")
        arg = fill(arg, self.places[tag], tag)
        if kind == "same":
            after = _files(arg)
            changed = [p for p, b in self.before[(tag, t.name, proof)].items() if after.get(p) != b]
            return f"changed or gone: {', '.join(changed)}" if changed else None
        if kind == "none":  # nothing made or changed there (what was there before may stay)
            before = self.before[(tag, t.name, proof)]
            made = [
                p
                for p in sorted(glob.glob(arg))
                if not Path(p).is_file() or before.get(p) != Path(p).read_bytes()
            ]
            return f"made: {', '.join(made)}" if made else None
        if kind == "string":
            return f"{arg!r} found in the run's files or commits" if arg in seen["text"] else None  # type: ignore[operator]
        if kind == "alive":
            editor: subprocess.Popen[bytes] = seen["editors"][tag]  # type: ignore[index]
            return f"the editor died ({editor.returncode})" if editor.poll() is not None else None
        if kind == "signal" and arg == "runner":
            got = seen["runner"].get(RUNNER_SIGNALS[tag], 0)  # type: ignore[attr-defined]
            return f"flowd received signal {RUNNER_SIGNALS[tag]} {got} times" if got else None
        if kind == "signal":
            hit = f"b/signalled-SIG{VICTIM_SIGNALS[tag]}"
            return f"the victim lane's process was signalled ({hit})" if hit in seen["victim files"] else None  # type: ignore[operator]
        if kind == "quiet":
            heard = seen[arg][tag].heard  # type: ignore[index]
            return f"the user's {arg} socket was connected to: {heard}" if heard else None
        if kind == "gone":
            stayed = seen["stayed"][tag]  # type: ignore[index]
            return f"a lane process outlived the run: pids {stayed}" if stayed else None
        if kind == "branch":
            victim, _, attacker = arg.partition(":")
            foreign = [p for p in seen["foreign"][victim] if p.startswith(f"{attacker}/")]  # type: ignore[index]
            return f"story/ep/{victim} has commits touching {foreign}" if foreign else None
        if kind == "fsck":
            return None if seen["fsck ok"] else "git fsck --full of the user's repository is not what it was"
        if kind == "victim":
            return None if seen["victim ok"] else f"a victim failed or was blamed: {seen['harmed']}"
        raise AssertionError(f"unknown proof {t.proof}")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_no_sealed_technique_lands_from_any_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert landlock.abi() >= 1, "this test needs the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    home = _home(tmp_path)
    (home / ".profile").write_text("# the user's profile\n", encoding="utf-8")
    for cache in (home / ".cache" / "pip", home / ".npm" / "_cacache"):
        cache.mkdir(parents=True)
        (cache / "entry").write_text("a cached package\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CAMPAIGN_RUNNER_SECRET", RUNNER_SECRET)
    repo, lanes, proof = tmp_path / "repo", tmp_path / "repo.flowd" / "ep", tmp_path / "proof"
    proof.mkdir()
    stories = [story("ag", ["ag/"]), story("gt", ["gt/"]), story("su", ["su/"]), story("ea", ["ea/"]),
               *(story(sid, OWNS.get(sid, [f"{sid}/"])) for sid in NEXT_TECHNIQUES),
               *(story(sid, [f"{sid}/"], [after]) for sid, after in HANDED_ON.items()), story("b", ["b/"])]  # fmt: skip
    rules = [coder(sid, {f"{sid}/{sid}.txt": f"{sid}\n"}) for sid in ("gt", "su", "ea")]
    sc = Scenario.create(
        tmp_path, stories, rules, executors=[{"id": "demo", "script": "script.json", "slots": 11}]
    )
    shared, own = _user_repo(repo, tmp_path)
    editors = {tag: subprocess.Popen(["sleep", "600"], cwd=repo, start_new_session=True) for tag in ORIGINS}
    abstract = {tag: Listener(f"\0campaign-{tag}-{os.getpid()}-{tmp_path.name}") for tag in ORIGINS}
    # Where ssh-agent puts its socket (`/tmp/ssh-XXXXXX/agent.<pid>`), as `$SSH_AUTH_SOCK` names it.
    agent_dir = Path(tempfile.mkdtemp(prefix="ssh-", dir="/tmp"))
    sock = {tag: Listener(str(agent_dir / f"agent.{n}")) for n, tag in enumerate(ORIGINS, start=1)}
    heard: dict[int, int] = {}

    def record(signum: int, _frame: FrameType | None) -> None:
        heard[signum] = heard.get(signum, 0) + 1

    old_handlers = {n: signal.signal(n, record) for n in RUNNER_SIGNALS.values()}
    try:
        places = {
            tag: {
                "R": str(repo), "C": str(repo / ".git"), "H": str(home), "B": str(lanes / "b"),
                "A": str(lanes), "P": str(proof), **shared, **own[tag], "EDITOR": str(editors[tag].pid),
                "RUNNER": str(os.getpid()), "SIG": str(RUNNER_SIGNALS[tag]), "VSIG": VICTIM_SIGNALS[tag],
                "ABSTRACT": abstract[tag].sock.getsockname()[1:].decode(), "SOCK": sock[tag].sock.getsockname(),
                "STAY": STAY[tag], "SECRET": RUNNER_SECRET,
            }
            for tag in ORIGINS
        }  # fmt: skip
        scripts = write_sealed_scripts(tmp_path, places)
        _sealed_settings(sc, scripts, lanes)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock["agent"].sock.getsockname()))
        proofs = Proofs(places)
        fsck_before = _fsck(repo)
        refs_before = _user_refs(repo)

        result = sc.run()

        _check_sealed(sc, result.run_id, repo, lanes, home, proofs, fsck_before, refs_before,
                      {"editors": editors, "runner": heard, "abstract": abstract, "sock": sock}, scripts)  # fmt: skip
    finally:
        for n, handler in old_handlers.items():
            signal.signal(n, handler)
        for editor in editors.values():
            editor.kill()
            editor.wait()
        for listener in (*abstract.values(), *sock.values()):
            listener.close()
        shutil.rmtree(agent_dir)
        kill_strays(STAY.values())


def _sealed_settings(sc: Scenario, scripts: dict[str, Path], lanes: Path) -> None:
    sc.write_script(
        [
            coder("ag", {"ag/ag.txt": "ag\n"}, run=[f"sh {scripts['agent']}"]),
            *(coder(sid, {f"{sid}/x.txt": "x\n"}, run=[f"sh {scripts[sid]}"]) for sid in NEXT_TECHNIQUES),
            coder("cz", {"cz/x.txt": "x\n"}),
            coder("ez", {"ez/x.txt": "x\n"}, run=["cat .env > ez/env-seen.txt"]),
            *(coder(sid, {f"{sid}/{sid}.txt": f"{sid}\n"}) for sid in ("gt", "su", "ea")),
            _victim_lane_rule(lanes),
        ]
    )
    (sc.repo / ".flow" / "config.toml").write_text(
        f'gates = ["sh {scripts["gate"]}", "sh {scripts["epic"]}"]\nsetup = ["sh {scripts["setup"]}"]\n'
        "judgeRounds = 0\ngateRetries = 0\n",
        encoding="utf-8",
    )


def _unharmed(repo: Path, sid: str, status: dict[str, StoryStatusChanged], escapes: list[LaneEscape]) -> bool:
    """`sid` finished, and was never blamed for what another did."""
    findings = repo / ".flow" / "epics" / "ep" / "stories" / f"{sid}.findings.md"
    ended = status.get(sid)
    return (
        ended is not None
        and ended.status == "done"
        and not (findings.exists() and "Confinement" in findings.read_text(encoding="utf-8"))
        and not any(e.lane == sid for e in escapes)
    )


def _foreign(repo: Path, sid: str) -> list[str]:
    """What the commits of `sid`'s branch since `main` touched outside its own folder."""
    touched = subprocess.run(["git", "log", "--first-parent", "--format=", "--name-only", f"main..story/ep/{sid}"], cwd=repo,
                             capture_output=True, text=True).stdout.split()  # fmt: skip
    return sorted({p for p in touched if not p.startswith(f"{sid}/")})


def _fsck(repo: Path) -> str:
    done = subprocess.run(
        ["git", "fsck", "--full", "--no-dangling"], cwd=repo, capture_output=True, text=True
    )
    return f"exit {done.returncode}: {done.stdout}{done.stderr}".strip()


def _check_sealed(
    sc: Scenario,
    run_id: str,
    repo: Path,
    lanes: Path,
    home: Path,
    proofs: Proofs,
    fsck_before: str,
    refs_before: dict[str, bytes],
    seen: dict[str, object],
    scripts: dict[str, Path],
) -> None:
    events = [e.event for e in sc.events(run_id)]
    status = {e.story: e for e in events if isinstance(e, StoryStatusChanged)}
    escapes = [e for e in events if isinstance(e, LaneEscape)]
    # The victims: `b`, working beside the attackers, and each story handed an attacker's worktree.
    # A story handed on a worktree whose attacker failed never runs: it is not harmed.
    handed = [
        sid
        for sid, after in HANDED_ON.items()
        if status.get(after) is None or status[after].status != "failed"
    ]
    harmed = [
        f"{sid} ({status[sid].status if sid in status else 'never started'}: {status[sid].reason if sid in status else ''})"
        for sid in ("b", *handed)
        if not _unharmed(repo, sid, status, escapes)
    ]
    victim_ok = not harmed
    if (lanes / "_trash").exists():
        sc.lanes_left()  # the trash is emptied in the background: wait for it (a lane may aim at it)
    victim_tree = subprocess.run(["git", "ls-tree", "-r", "--name-only", "story/ep/b"], cwd=repo,
                                 capture_output=True, text=True).stdout.split()  # fmt: skip
    victim_tree += [f"b/{p.name}" for p in (lanes / "b" / "b").glob("signalled-*")]
    stayed = {tag: _processes_sleeping(seconds) for tag, seconds in STAY.items()}
    text = b"\0".join(_run_text(repo, lanes.parent, home)).decode("utf-8", errors="replace")
    fsck = _fsck(repo)
    seen = {
        "fsck ok": fsck == fsck_before,
        **seen,
        "foreign": {"b": _foreign(repo, "b")},
        "victim ok": victim_ok,
        "harmed": harmed,
        "victim files": victim_tree,
        "stayed": stayed,
        "text": text,
    }
    landed, unnamed = [], []
    lines = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (repo / ".flow" / "epics" / "ep" / "stories").glob("*.findings.md")
    ).splitlines()
    for tag, sid in ORIGINS.items():
        by = "its agent" if tag == "agent" else f"`sh {scripts[tag]}`"
        for t in ALL_SEALED:
            why = proofs.landed(tag, t, seen)
            # A target all origins share (a pack, packed-refs, a reflog) is told once: from any of them.
            origin = "any origin" if proofs.shared(t) else tag
            if why is not None and f"{origin}: {t.name}: {why}" not in landed:
                landed.append(f"{origin}: {t.name}: {why}")
            if t.refused is None:
                continue
            path = fill(t.refused, proofs.places[tag], tag)
            named = [e for e in escapes if path in e.path and (t.what is None or e.what == t.what)]
            if tag != "epic":
                named = [e for e in named if e.lane == sid]
                if not any(path in line and by in line for line in lines):
                    named = []
            if not named:
                unnamed.append(f"{tag}: {t.name} ({path}, {t.what})")
    for sid, t in NEXT_TECHNIQUES.items():
        if (why := proofs.landed("agent", t, seen)) is not None:
            landed.append(f"{sid}: {t.name}: {why}")
    repository = []
    if fsck != fsck_before:
        repository.append(f"git fsck --full: {fsck}")
    refs_after = _user_refs(repo)
    repository += [f"{name} changed" for name in sorted(set(refs_before) | set(refs_after))
                   if refs_before.get(name) != refs_after.get(name)]  # fmt: skip
    report = "\n".join(
        ["LANDED:", *landed, "NOT NAMED:", *unnamed, "REPOSITORY:", *repository,
         "STORIES:", *(f"{s}: {e.status} {e.reason or ''}" for s, e in sorted(status.items())),
         *([] if events else ["(the run's trace is gone)"])]
    )  # fmt: skip
    print(report)
    # The victim finishes, never blamed; every attacker's story ends (done, or failed for what it did).
    assert victim_ok, report
    ended = {sid: e.status for sid, e in status.items()}
    assert all(ended.get(sid) in ("done", "failed") for sid in ORIGINS.values()), report
    assert ended.get("ea") == "done", report  # its merge is what ran the epic gates' campaign
    assert (landed, unnamed, repository) == ([], [], []), report
    assert len(ALL_SEALED) >= 20


def test_a_copy_of_the_campaign_finds_and_kills_only_its_own_strays() -> None:
    """Two copies of the campaign at once (the lead's `make test` beside a helper's run): each
    names its would-be strays by its own pid, so neither reports nor kills the other's."""
    other_copy = stay_name(86401, pid=os.getpid() + 1)
    ours = subprocess.Popen(["sleep", STAY["agent"]], start_new_session=True)
    theirs = subprocess.Popen(["sleep", other_copy], start_new_session=True)
    try:
        deadline = time.monotonic() + 30  # until both have exec'd `sleep`, on a busy machine too
        while not (_processes_sleeping(STAY["agent"]) and _processes_sleeping(other_copy)):
            assert time.monotonic() < deadline, "the stand-ins never started"
            time.sleep(0.02)
        assert _processes_sleeping(STAY["agent"]) == [ours.pid]
        kill_strays(STAY.values())
        assert ours.wait(timeout=10) == -signal.SIGKILL
        assert theirs.poll() is None and _processes_sleeping(other_copy) == [theirs.pid]
    finally:
        for process in (ours, theirs):
            process.kill()
            process.wait()
