"""A lane's processes against what lies outside it besides files, on this machine's kernel
(Landlock ABI 6 scopes, the binder's mount namespace; docs/sandbox.md "Signals", "Abstract
sockets", "Socket files", "Caches"): they signal no process but their own, reach no abstract
socket and no socket file of the user's, write no cache another lane or the user reads, and
each refusal the tools print becomes a `signal`/`socket` escape."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.sandbox import landlock, sockets
from flowd.sandbox.confine import Confinement, Scanner
from flowd.vcs import lane_repo
from flowd.vcs.quarantine import take_in


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    assert landlock.abi() >= landlock.SCOPE_ABI, "these tests need Landlock ABI 6 (Linux 6.12) for its scopes"
    assert sockets.available(), "these tests need user namespaces for the binder's mount namespace"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# r\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    for story in ("a", "b"):
        wt = tmp_path / "repo.flowd" / "ep" / story
        subprocess.run(
            ["git", "worktree", "add", "-q", "-b", f"story/ep/{story}", str(wt)], cwd=repo, check=True
        )
    (tmp_path / "home" / ".npm").mkdir(parents=True)
    return repo


def _confinement(repo: Path) -> Confinement:
    root = repo.parent
    return Confinement(
        "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=root / "repo.flowd", epic="ep",
        home=root / "home",
    )  # fmt: skip


def _sh(
    c: Confinement, cwd: Path, script: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    with c.spawn(cwd) as confined:
        return subprocess.run(
            confined.argv(["/bin/sh", "-c", script]),
            cwd=cwd,
            env={**os.environ, **(env or {}), **confined.env},
            pass_fds=confined.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the user's outside every lane (the editor's stand-in)."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def test_a_lane_signals_no_process_outside_it(repo: Path, victim: subprocess.Popen[bytes]) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    # The user's process, and the process that started the lane's (the runner's stand-in).
    done = _sh(_confinement(repo), lane, f"kill -TERM {victim.pid}; echo $?; kill -0 $PPID; echo $?")
    assert done.stdout.split() == ["1", "1"], done.stdout + done.stderr
    assert victim.poll() is None
    # Unconfined, the same kill lands: the refusal is the scope's, not the test's.
    subprocess.run(["/bin/sh", "-c", f"kill -TERM {victim.pid}"], check=True)
    assert victim.wait(timeout=10) == -signal.SIGTERM


def test_a_lane_signals_its_own_children_and_flowd_signals_the_lane(repo: Path) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    done = _sh(_confinement(repo), lane, "sleep 600 & kill -TERM $!; wait $!; echo $?")
    assert done.stdout.split() == ["143"], done.stdout + done.stderr  # 128 + SIGTERM
    with _confinement(repo).spawn(lane) as confined:
        process = subprocess.Popen(confined.argv(["sleep", "600"]), cwd=lane, pass_fds=confined.pass_fds)
    process.terminate()  # flowd, unconfined, stops a lane's process (cancel, timeouts)
    assert process.wait(timeout=10) == -signal.SIGTERM


def test_a_lane_reaches_no_abstract_socket_outside_it(repo: Path) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    name = f"flowd-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        connect = f"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}'); print('connected')"
        assert (
            subprocess.run(["python3", "-c", connect], capture_output=True, text=True).stdout == "connected\n"
        )
        done = _sh(_confinement(repo), lane, f'python3 -c "{connect}"')
        assert "PermissionError" in done.stderr and "connected" not in done.stdout
    # A socket the lane itself listens on stays the lane's to use (by its children too).
    own = repo.parent / "own.py"
    own.write_text(
        "import socket, subprocess, sys\n"
        "server = socket.socket(socket.AF_UNIX)\nserver.bind('\\0' + sys.argv[1])\nserver.listen()\n"
        "child = 'import socket, sys; socket.socket(socket.AF_UNIX).connect(chr(0) + sys.argv[1]); print(\"own ok\")'\n"
        "subprocess.run([sys.executable, '-c', child, sys.argv[1]], check=True)\n",
        encoding="utf-8",
    )
    assert _sh(_confinement(repo), lane, f"python3 {own} own-{os.getpid()}").stdout == "own ok\n"


def test_a_lane_reaches_no_socket_file_of_the_users(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    agent_dir = Path(tempfile.mkdtemp(prefix="ssh-"))  # where ssh-agent puts its socket: /tmp/ssh-*/agent.N
    runtime = Path(tempfile.mkdtemp(prefix="flowd-runtime-"))  # $XDG_RUNTIME_DIR: hidden whole
    (runtime / "bus-note").write_text("x", encoding="utf-8")
    try:
        with socket.socket(socket.AF_UNIX) as agent, socket.socket(socket.AF_UNIX) as bus:
            agent.bind(str(agent_dir / "agent.1"))
            agent.listen()
            bus.bind(str(runtime / "bus"))
            bus.listen()
            monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_dir / "agent.1"))
            monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
            connect = (
                "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('connected')"
            )
            for path in (agent_dir / "agent.1", runtime / "bus"):
                reached = subprocess.run(
                    ["python3", "-c", connect, str(path)], capture_output=True, text=True
                )
                assert reached.stdout == "connected\n"  # unconfined, it is reachable
                done = _sh(
                    _confinement(repo), lane, f'python3 -c "{connect}" {path}; echo "[$SSH_AUTH_SOCK]"'
                )
                assert "connected" not in done.stdout, done.stdout + done.stderr
                assert done.stdout.endswith("[]\n")  # the variable naming the agent is not handed over
            seen = _sh(_confinement(repo), lane, f"ls -A {runtime}; echo listed")
            assert seen.stdout == "listed\n", seen.stdout + seen.stderr  # an empty tmpfs over it
    finally:
        for directory in (agent_dir, runtime):
            for entry in directory.iterdir():
                entry.unlink()
            directory.rmdir()


def test_a_socket_made_or_removed_in_a_folder_listed_before_is_seen_at_the_next_start() -> None:
    """flowd keeps each scanned folder's listing while the folder's time is unchanged
    (docs/sandbox.md "Socket files"): a socket made in a folder listed and unchanged for long is
    hidden from the next process all the same, and one removed is no longer masked."""
    # Where tmux keeps its server socket, /tmp/tmux-<uid>/: in /tmp itself, which flowd scans,
    # whatever TMPDIR the test run has.
    folder = Path(tempfile.mkdtemp(prefix="tmux-", dir="/tmp"))
    try:
        long_ago = 1_600_000_000
        os.utime(folder, (long_ago, long_ago))
        real = os.path.realpath(folder)
        assert not [m for m in sockets.masks(Path.home(), []) if m.startswith(f"f{real}/")]  # listed, kept
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(folder / "default"))
            assert f"f{real}/default" in sockets.masks(Path.home(), [])
        (folder / "default").unlink()
        assert f"f{real}/default" not in sockets.masks(Path.home(), [])
        os.utime(folder, (long_ago, long_ago))
        sockets.masks(Path.home(), [])
        assert real in sockets._LISTINGS
    finally:
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()
    sockets.masks(Path.home(), [])
    assert real not in sockets._LISTINGS  # a folder gone takes its listing along


def test_a_lane_still_commits_inside_its_namespace(repo: Path) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    script = (
        "echo x > n.txt && git add n.txt && git -c user.name=t -c user.email=t@t commit -qm own && echo ok"
    )
    done = _sh(_confinement(repo), lane, script)
    assert done.stdout == "ok\n", done.stderr
    # The commit is in the lane's quarantine until flowd takes it in (docs/sandbox.md "The quarantine").
    assert take_in(repo / ".git", repo / ".git" / "worktrees" / "a")
    assert lane_repo.take_branch(repo / ".git", repo / ".git" / "worktrees" / "a", lane)
    log = subprocess.run(
        ["git", "log", "-1", "--format=%s", "story/ep/a"], cwd=repo, capture_output=True, text=True
    )
    assert log.stdout == "own\n"


def test_caches_are_the_lanes_own(repo: Path) -> None:
    """One lane cannot write what another lane, or the user's own next install, reads."""
    root = repo.parent
    a, b = root / "repo.flowd" / "ep" / "a", root / "repo.flowd" / "ep" / "b"
    c = _confinement(repo)
    done = _sh(
        c,
        a,
        'mkdir -p "$npm_config_cache" && echo planted > "$npm_config_cache/pkg" && echo "$npm_config_cache"',
    )
    a_cache = Path(done.stdout.strip())
    assert a_cache.joinpath("pkg").read_text(encoding="utf-8") == "planted\n"
    assert a_cache.parent.parent == repo / ".git/worktrees/a/flowd-cache"
    done = _sh(c, b, f'echo x > {a_cache}/pkg; echo x > {root}/home/.npm/pkg; echo "$PIP_CACHE_DIR"')
    assert a_cache.joinpath("pkg").read_text(encoding="utf-8") == "planted\n"
    assert not (root / "home" / ".npm" / "pkg").exists()
    b_pip = Path(done.stdout.strip())
    assert b_pip.name == "pip" and b_pip.parent.parent == repo / ".git/worktrees/b/flowd-cache"
    assert done.stderr.count("Permission denied") == 2, done.stderr
    # The same worktree in a later run (or handed on as a spare): what the lane left is gone.
    again = _sh(_confinement(repo), a, 'echo "$npm_config_cache"').stdout.strip()
    assert again != str(a_cache) and not a_cache.exists()


def test_refused_signals_and_connects_become_escapes(repo: Path, victim: subprocess.Popen[bytes]) -> None:
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    told: list[tuple[str, str, str, str]] = []
    c = _confinement(repo)
    c.report = lambda *args: told.append(args)
    name = f"flowd-esc-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        probe = repo.parent / "probe.py"
        probe.write_text(
            "import socket, sys\ntry:\n    socket.socket(socket.AF_UNIX).connect(chr(0) + sys.argv[1])\n"
            "except OSError as e:\n    print(f'connect @{sys.argv[1]}: {e}', file=sys.stderr)\n",
            encoding="utf-8",
        )
        script = f"bash -c 'kill -TERM {victim.pid}'; python3 {probe} {name}"
        done = _sh(c, lane, script)
    c.scan(done.stderr, lane, "its agent")
    assert told == [
        ("a", f"pid {victim.pid}", "signal", "its agent"),
        ("a", f"@{name}", "socket", "its agent"),
    ], done.stdout + done.stderr


def test_a_refused_signal_is_an_escape_and_a_line_of_the_findings(
    repo: Path, victim: subprocess.Popen[bytes]
) -> None:
    from flowd.engine.confinement import run_confinement
    from flowd.engine.state import EpicPaths
    from flowd.events.model import Event, LaneEscape
    from flowd.store.config import load_settings
    from flowd.vcs.gitops import Repo

    events: list[Event] = []
    paths = EpicPaths(repo, "ep")
    c = run_confinement(
        Repo.discover(repo), load_settings(repo), repo.parent / "repo.flowd", "ep", paths, events.append
    )
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    with c.spawn(lane) as confined:
        done = subprocess.run(
            confined.argv(["bash", "-c", f"kill -TERM {victim.pid}"]),
            cwd=lane,
            env={**os.environ, **confined.env},
            pass_fds=confined.pass_fds,
            capture_output=True,
            text=True,
        )
    c.scan(done.stderr, lane, "`make test`")
    assert events == [LaneEscape(lane="a", path=f"pid {victim.pid}", what="signal", action="denied")]
    findings = paths.findings("a").read_text(encoding="utf-8")
    assert (
        f"refused `make test` a signal to a process outside this story's lane: `pid {victim.pid}`" in findings
    )
    assert victim.poll() is None


def test_a_kill_refused_in_a_script_is_named(repo: Path, victim: subprocess.Popen[bytes]) -> None:
    # `sh script.sh` (dash) names the script before its message, and no process: `<script>: 2:
    # kill: Operation not permitted`; bash's `<script>: line 2: kill: (<pid>) - …` (an agent's
    # run command, a gate, a setup command, an epic gate all print it so).
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    told: list[tuple[str, str, str, str]] = []
    c = _confinement(repo)
    c.report = lambda *args: told.append(args)
    script = repo.parent / "kill-it.sh"
    script.write_text(f"echo start\nkill -TERM {victim.pid}\n", encoding="utf-8")
    for shell in ("sh", "bash"):
        done = _sh(c, lane, f"{shell} {script}")
        assert f"{script}: " in done.stderr and "Operation not permitted" in done.stderr, done.stderr
        c.scan(done.stderr, lane, f"`{shell} {script}`")
    assert told == [
        ("a", "a process", "signal", f"`sh {script}`"),
        ("a", f"pid {victim.pid}", "signal", f"`bash {script}`"),
    ]
    assert victim.poll() is None


def test_pythons_refused_kill_and_connect_are_named(repo: Path, victim: subprocess.Popen[bytes]) -> None:
    """Python prints a refused `os.kill` or `socket.connect` as a traceback
    whose last line names no file (`PermissionError: [Errno 1] Operation not permitted`): the
    source line above it names the call (with 3.11's `^^^` markers under it)."""
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    told: list[tuple[str, str, str, str]] = []
    c = _confinement(repo)
    c.report = lambda *args: told.append(args)
    name = f"flowd-py-{os.getpid()}"
    scripts = {
        "kill": f"import os, signal\nos.kill({victim.pid}, signal.SIGTERM)\n",
        "marked": f"import os\nok = os.kill({victim.pid}, 15) or None\n",
        "connect": f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0{name}')\n",
    }
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("\0" + name)
        server.listen()
        for what, text in scripts.items():
            script = repo.parent / f"py-{what}.py"
            script.write_text(text, encoding="utf-8")
            done = _sh(c, lane, f"python3 {script}")
            assert "[Errno 1] Operation not permitted" in done.stderr, done.stderr
            c.scan(done.stderr, lane, what)
            if what == "kill":
                # A gate's output comes in reads: the error's line may come after its source line.
                scanner = Scanner(c, lane, "kill, read in two")
                cut = done.stderr.index("PermissionError")
                scanner.feed(done.stderr[:cut].encode())
                scanner.feed(done.stderr[cut:].encode())
                scanner.close()
    assert told == [
        ("a", f"pid {victim.pid}", "signal", "kill"),
        ("a", f"pid {victim.pid}", "signal", "kill, read in two"),
        ("a", f"pid {victim.pid}", "signal", "marked"),
        ("a", f"@{name}", "socket", "connect"),
    ]
    assert victim.poll() is None


def test_a_refused_tag_delete_names_packed_refs_and_nothing_outside(repo: Path) -> None:
    """`git tag -d` of a packed tag: "could not delete reference refs/tags/v1: Unable to create
    '<common>/packed-refs.lock': Permission denied". The ref's name is not a path outside the
    lane (it once was reported as `/tags/v1`, `outside`); the lock file is the refusal."""
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "v1", "-m", "v"],
        cwd=repo,
        check=True,
    )
    subprocess.run(["git", "pack-refs", "--all"], cwd=repo, check=True)
    packed = (repo / ".git" / "packed-refs").read_bytes()
    lane = repo.parent / "repo.flowd" / "ep" / "a"
    c = _confinement(repo)
    done = _sh(c, lane, f"git -C {repo} tag -d v1")  # the lane's own git sees a copy of the tags
    assert "refs/tags/v1" in done.stderr and "Permission denied" in done.stderr, done.stderr
    assert c.denials(done.stderr, lane) == [(str(repo / ".git" / "packed-refs"), "gitRef")]
    assert (repo / ".git" / "packed-refs").read_bytes() == packed
