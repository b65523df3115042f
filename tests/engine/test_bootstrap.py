"""Worktree bootstrap end to end (docs/worktree-bootstrap.md): real repositories, the scripted ACP
agent, real gates that bind real ports."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.engine.bootstrap import bootstrap_files
from flowd.engine.perimeter_now import perimeter_now
from flowd.events.model import GateResult, Info, StoryStatusChanged, WorktreePrepared
from flowd.plan.parse import load_plan
from flowd.store.config import Settings
from flowd.vcs.gitops import Repo
from tests.engine.scenario import FLOWD, Scenario, coder, git, story, types

PORT_RULE = "Ports: this lane has ports {ports} to itself"

GITIGNORE = ".env\n*.local.toml\nsecrets/\n*.log\n"
INCLUDE = ".env\nconfig/\nsecrets/\nREADME.md\nnotes.txt\nlinked.env\n"


def record(path: str, copied: str = "config/app.local.toml") -> str:
    """A coder command writing what it saw into `path`: its lane's variables and a copied file."""
    return (
        f"python3 -c \"import os, pathlib; p = pathlib.Path('{path}'); p.parent.mkdir(exist_ok=True); "
        "p.write_text(__import__('json').dumps("
        "{k: os.environ.get(k) for k in ('FLOWD_LANE', 'FLOWD_PORT', 'FLOWD_PORTS')} | "
        f"{{'copied': pathlib.Path('{copied}').read_text()}}))\""
    )


def _user_files(repo: Path, outside: Path) -> None:
    """The user's checkout: ignored files (some matched by .worktreeinclude), and one that is not ignored."""
    (repo / ".env").write_text("TOKEN=users-secret\n", encoding="utf-8")
    (repo / "config").mkdir()
    (repo / "config" / "app.local.toml").write_text("debug = true\n", encoding="utf-8")
    (repo / "secrets").mkdir()
    (repo / "secrets" / "key.pem").write_text("KEY\n", encoding="utf-8")
    os.symlink("key.pem", repo / "secrets" / "current.pem")  # inside: recreated as a link
    (repo / "app.log").write_text("ignored, not included\n", encoding="utf-8")
    (repo / "notes.txt").write_text("included, not ignored\n", encoding="utf-8")
    outside.write_text("SHARED=1\n", encoding="utf-8")
    os.symlink(outside, repo / "linked.env")  # out of the repository: arrives as a copy of the file


def test_ignored_files_are_copied_never_committed_never_violations(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [
            coder(
                "api",
                {".env": "TOKEN=changed-by-the-agent\n", "src/api.py": "x = 1\n"},
                run=[record("src/seen.json")],
            )
        ],
        settings='gates = ["test -f .env && test -n \\"$FLOWD_PORT\\""]\njudgeRounds = 0\n'
        "maxReviewRounds = 0\n[worktree]\nportBase = 47100\n",
        files={".gitignore": GITIGNORE + "*.env\n", ".worktreeinclude": INCLUDE},
    )
    _user_files(sc.repo, tmp_path / "shared.env")
    result = sc.run()
    assert result.outcome == "done", result.view
    events = sc.events(result.run_id)
    prepared = [e.event for e in events if isinstance(e.event, WorktreePrepared)]
    assert prepared == [
        WorktreePrepared(
            lane="api",
            copied=[".env", "config/app.local.toml", "linked.env", "secrets/current.pem", "secrets/key.pem"],
            port=47100,
            ports="47100-47109",
        )
    ]
    assert "PerimeterViolation" not in set(types(events))
    assert all(e.event.ok for e in events if isinstance(e.event, GateResult))  # the epic gate found .env too
    # The coder's command ran in a worktree holding the copy, with the lane's variables set.
    seen = json.loads(git(sc.repo, "show", "epic/ep:src/seen.json"))
    assert seen == {
        "FLOWD_LANE": "api",
        "FLOWD_PORT": "47100",
        "FLOWD_PORTS": "47100-47109",
        "copied": "debug = true\n",
    }
    # Nothing copied was committed, on the story branch or the epic; the user's files are untouched.
    for branch in ("epic/ep", "story/ep/api"):
        files = git(sc.repo, "ls-tree", "-r", "--name-only", branch).split()
        assert not {".env", "config/app.local.toml", "secrets/key.pem", "linked.env", "notes.txt"} & set(
            files
        )
    history = git(sc.repo, "log", "--all", "--name-only", "--format=").split()
    assert ".env" not in history and "secrets/key.pem" not in history
    assert (sc.repo / ".env").read_text(encoding="utf-8") == "TOKEN=users-secret\n"
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert (epic_wt / "secrets" / "current.pem").is_symlink()
    assert os.readlink(epic_wt / "secrets" / "current.pem") == "key.pem"
    # A link out of the repository arrives as the file it points to, never as a link.
    assert not (epic_wt / "linked.env").is_symlink()
    assert (epic_wt / "linked.env").read_text(encoding="utf-8") == "SHARED=1\n"
    assert not (epic_wt / "notes.txt").exists() and not (epic_wt / "app.log").exists()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("../shared/.env", "reaches outside the repository with `..`"),
        ("config/../../x", "reaches outside the repository with `..`"),
        ("!../keep", "reaches outside the repository with `..`"),
        ("~/.aws/credentials", "names a path outside the repository"),
    ],
)
def test_a_pattern_escaping_the_repository_stops_the_run_before_anything_changes(
    tmp_path: Path, line: str, why: str
) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [coder("api", {"src/api.py": "x = 1\n"})],
        files={".worktreeinclude": f"# ours\n{line}\n"},
    )
    before = git(sc.repo, "for-each-ref")
    with pytest.raises(InputError) as caught:
        sc.run()
    message = str(caught.value)
    assert message == (
        f"{sc.repo / '.worktreeinclude'}:2: `{line.removeprefix('!')}` {why}; "
        "list only paths inside the repository, relative to its root"
    )
    assert git(sc.repo, "for-each-ref") == before
    assert not (sc.repo / ".flow" / "runs").exists() and not sc.worktree_root.exists()


def test_an_absolute_path_outside_is_refused_by_flowd_run(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / ".env"
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [coder("api", {"src/api.py": "x = 1\n"})],
        files={".worktreeinclude": f".env\n{outside}\n"},
    )
    done = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"flowd: {sc.repo / '.worktreeinclude'}:2: `{outside}` is an absolute path outside the "
        "repository; list only paths inside the repository, relative to its root"
    ]
    assert "epic/ep" not in git(sc.repo, "branch") and not sc.worktree_root.exists()


def _free_base(count: int) -> int:
    """A port base with `count` consecutive ports free on 127.0.0.1 right now (others use this machine).

    The search starts at a random base, so two runs of these tests at once (pytest-xdist workers,
    other checkouts on the machine) rarely pick the same range between the check and the bind."""
    bases = list(range(42000, 60000, 500))
    shift = random.randrange(len(bases))
    for base in bases[shift:] + bases[:shift]:
        held = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise AssertionError("no free port range on this machine")


GATE = """import os, socket, sys, time
port = int(os.environ["FLOWD_PORT"])
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
except OSError as exc:
    sys.exit(f"port {port} of lane {os.environ['FLOWD_LANE']} is taken: {exc}")
s.listen()
time.sleep(0.5)
s.close()
"""


@pytest.mark.slow
def test_eight_parallel_stories_whose_gate_binds_its_port_never_collide(tmp_path: Path) -> None:
    ids = [f"s{n}" for n in range(8)]
    base = _free_base(80)
    sc = Scenario.create(
        tmp_path,
        [story(sid, [f"{sid}.txt"]) for sid in ids],
        [coder(sid, {f"{sid}.txt": sid}, delayMs=300) for sid in ids],
        settings=f'concurrency = 8\ngates = ["python3 gate.py"]\njudgeRounds = 0\nmaxReviewRounds = 0\n'
        f"[worktree]\nportBase = {base}\n",
        files={"gate.py": GATE},
        executors=[{"id": "demo", "script": "script.json", "slots": 8}],
    )
    result = sc.run()
    events = sc.events(result.run_id)
    gates = [e.event for e in events if isinstance(e.event, GateResult)]
    # One task gate per story; the epic's per candidate of the merge train (docs/merging.md).
    task_gates = [g for g in gates if g.where == "task"]
    assert result.outcome == "done" and len(task_gates) == 8 and 1 <= len(gates) - 8 <= 8
    assert all(g.ok for g in gates)
    # The trace's own account: a port is never held by two lanes at once (held from
    # WorktreePrepared until the story's last status).
    holder: dict[int, str] = {}
    for envelope in events:
        event = envelope.event
        if isinstance(event, WorktreePrepared):
            assert event.port not in holder, (
                f"{event.lane} got {event.port}, held by {holder.get(event.port)}"
            )
            assert (event.port - base) % 10 == 0 and base <= event.port < base + 80
            holder[event.port] = event.lane
        elif isinstance(event, StoryStatusChanged) and event.status in ("done", "failed", "waiting"):
            holder = {p: lane for p, lane in holder.items() if lane != event.story}
    assert sorted(e.event.lane for e in events if isinstance(e.event, WorktreePrepared)) == ids


def test_a_parallel_task_gets_the_copies_and_ports_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))
    base = _free_base(20)
    plan = {
        "tasks": [
            {
                "title": name,
                "description": f"Write src/{name[0]}.json.\nOwns: src/{name[0]}.json\nDepends on: none",
            }
            for name in ("alpha", "beta")
        ]
    }
    rules = [
        {"when": {"role": "planner", "story": "s"}, "reply": json.dumps(plan)},
        # Each coder rule answers only a prompt naming its lane's ports; the home task is slow, so
        # the aside task's gate binds its port while the home task's may.
        coder(
            "s",
            when={"role": "coder", "task": "^alpha$", "prompt": PORT_RULE.format(ports=f"{base}-{base + 9}")},
            run=[record("src/a.json", ".env")],
            delayMs=800,
        ),
        coder(
            "s",
            when={
                "role": "coder",
                "task": "^beta$",
                "prompt": PORT_RULE.format(ports=f"{base + 10}-{base + 19}"),
            },
            run=[record("src/b.json", ".env")],
        ),
    ]
    sc = Scenario.create(
        tmp_path,
        [story("s", ["src/"])],
        rules,
        settings=f'taskConcurrency = 2\ngates = ["python3 gate.py"]\njudgeRounds = 0\nmaxReviewRounds = 0\n'
        f"[worktree]\nportBase = {base}\n",
        files={"gate.py": GATE, ".gitignore": ".env\n", ".worktreeinclude": ".env\n"},
    )
    (sc.repo / ".env").write_text("TOKEN=1\n", encoding="utf-8")
    result = sc.run()
    assert result.outcome == "done", result.view.lanes["s"].reason
    home = json.loads(git(sc.repo, "show", "epic/ep:src/a.json"))
    aside = json.loads(git(sc.repo, "show", "epic/ep:src/b.json"))
    assert home == {
        "FLOWD_LANE": "s",
        "FLOWD_PORT": str(base),
        "FLOWD_PORTS": f"{base}-{base + 9}",
        "copied": "TOKEN=1\n",
    }
    assert aside == {
        "FLOWD_LANE": "s",
        "FLOWD_PORT": str(base + 10),
        "FLOWD_PORTS": f"{base + 10}-{base + 19}",
        "copied": "TOKEN=1\n",
    }
    events = [e.event for e in sc.events(result.run_id)]
    assert f"task 2: worktree prepared: 1 file(s) from your checkout, ports {base + 10}-{base + 19}" in [
        e.message for e in events if isinstance(e, Info)
    ]
    assert all(e.ok for e in events if isinstance(e, GateResult))
    assert ".env" not in git(sc.repo, "log", "--all", "--name-only", "--format=").split()


def test_a_resumed_story_is_prepared_again_with_the_checkouts_current_files(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [coder("api", {"src/api.py": "x = 1\n"})],
        settings='gates = ["grep -q ready .env"]\njudgeRounds = 0\nmaxReviewRounds = 0\n',
        files={".gitignore": ".env\n", ".worktreeinclude": ".env\n"},
    )
    (sc.repo / ".env").write_text("STATE=draft\n", encoding="utf-8")
    first = sc.run()
    assert first.outcome == "failed"
    (sc.repo / ".env").write_text("STATE=ready\n", encoding="utf-8")  # the user fixes their file
    second = sc.run()
    assert second.outcome == "done", second.view.lanes["api"].reason
    for run in (first, second):
        prepared = [e.event for e in sc.events(run.run_id) if isinstance(e.event, WorktreePrepared)]
        assert [(p.lane, p.copied) for p in prepared] == [("api", [".env"])]
    assert any(
        isinstance(e.event, Info) and e.event.message == "resuming story/ep/api"
        for e in sc.events(second.run_id)
    )


def test_port_ranges_past_65535_stop_the_run_before_anything_changes(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [coder("api", {"src/api.py": "x = 1\n"})],
        settings="concurrency = 4\ntaskConcurrency = 2\n[worktree]\nportBase = 60000\nportsPerLane = 1000\n",
    )
    with pytest.raises(InputError) as caught:
        sc.run()
    assert str(caught.value) == (
        f"{sc.repo / '.flow' / 'config.toml'}: [worktree] portBase/portsPerLane: 8 lane(s) of 1000 port(s) "
        "from 60000 would need ports up to 67999, past 65535; lower portBase or portsPerLane"
    )
    assert not (sc.repo / ".flow" / "runs").exists() and not sc.worktree_root.exists()


def test_copies_are_invisible_to_commits_and_the_perimeter_and_only_ignored_files_go(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/"])],
        [],
        files={".gitignore": ".env\n", ".worktreeinclude": ".env\nlocal.cfg\nREADME.md\nnotes.txt\n"},
    )
    (sc.repo / ".env").write_text("TOKEN=1\n", encoding="utf-8")
    (sc.repo / "notes.txt").write_text("not ignored\n", encoding="utf-8")
    # Ignored in the user's checkout only, by a .gitignore change they have not committed.
    (sc.repo / ".gitignore").write_text(".env\nlocal.cfg\n", encoding="utf-8")
    (sc.repo / "local.cfg").write_text("x\n", encoding="utf-8")
    repo = Repo(sc.repo)
    worktree = tmp_path / "wt"
    repo.create_branch("epic/ep", "main")
    repo.worktree_add(worktree, "story/ep/api", start="epic/ep")
    got = bootstrap_files(repo, Settings(), worktree)
    assert got.copied == [".env"]
    assert got.skipped == [
        (
            "local.cfg",
            "not ignored in the worktree (tracked there, or its .gitignore differs from your checkout's)",
        )
    ]
    assert not (worktree / "local.cfg").exists() and not (worktree / "notes.txt").exists()
    (worktree / ".env").write_text("TOKEN=changed\n", encoding="utf-8")  # an agent edits the copy
    plan = load_plan(sc.plan_path)
    assert perimeter_now(repo, plan, "api", worktree) == []
    assert repo.status_paths(worktree) == []
    assert repo.commit_all(worktree, "api: nothing to commit") is None


def test_copies_stay_out_of_commits_even_when_the_story_stops_ignoring_them(tmp_path: Path) -> None:
    sc = Scenario.create(
        tmp_path,
        [story("api", ["src/", ".gitignore"])],
        [],
        files={".gitignore": ".env\n", ".worktreeinclude": ".env\n"},
    )
    (sc.repo / ".env").write_text("TOKEN=users-secret\n", encoding="utf-8")
    repo = Repo(sc.repo)
    worktree = tmp_path / "wt"
    repo.create_branch("epic/ep", "main")
    repo.worktree_add(worktree, "story/ep/api", start="epic/ep")
    assert bootstrap_files(repo, Settings(), worktree).copied == [".env"]
    # The story's agent rewrites .gitignore so that .env is no longer ignored, and adds a file.
    (worktree / ".gitignore").write_text("*.log\n", encoding="utf-8")
    (worktree / "src").mkdir()
    (worktree / "src" / "api.py").write_text("x = 1\n", encoding="utf-8")
    plan = load_plan(sc.plan_path)
    assert perimeter_now(repo, plan, "api", worktree) == []  # .env is not the story's, yet no violation
    assert repo.status_paths(worktree) == [".gitignore", "src/api.py"]
    assert ".env" not in repo.changed_files(worktree, "epic/ep")
    assert "users-secret" not in repo.diff(worktree, "epic/ep")
    assert repo.commit_all(worktree, "api: work") is not None
    committed = git(worktree, "show", "--name-only", "--format=", "HEAD").split()
    assert committed == [".gitignore", "src/api.py"]
    assert (worktree / ".env").read_text(encoding="utf-8") == "TOKEN=users-secret\n"
    # A second commit in the same worktree leaves it out too.
    (worktree / "src" / "api.py").write_text("x = 2\n", encoding="utf-8")
    repo.commit_all(worktree, "api: more")
    assert ".env" not in git(worktree, "log", "--name-only", "--format=", "epic/ep..HEAD").split()


def test_a_worktree_root_flowd_cannot_write_is_one_sentence_before_anything(tmp_path: Path) -> None:
    """`worktreeRoot` under something that is not a folder (as under a read-only or immutable
    one): `flowd run` says so and what to do, exit 2, before any branch, run or folder is made."""
    sc = Scenario.create(tmp_path, [story("api", ["src/"])], [coder("api", {"src/api.py": "x = 1\n"})])
    (tmp_path / "blocker").write_text("a file\n", encoding="utf-8")
    with (sc.repo / ".flow" / "config.toml").open("a", encoding="utf-8") as config:
        config.write('worktreeRoot = "../blocker/worktrees"\n')
    done = subprocess.run(
        [*FLOWD, "run", str(sc.plan_path)], cwd=sc.repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"flowd: cannot make the run's worktrees in {tmp_path / 'blocker' / 'worktrees'}: "
        f"{tmp_path / 'blocker'} is not a folder; make it writable, or set worktreeRoot in "
        f"{sc.repo / '.flow' / 'config.toml'} to a folder you can write (docs/running.md)"
    ]
    assert "epic/ep" not in git(sc.repo, "branch") and not (sc.repo / ".flow" / "runs").exists()
