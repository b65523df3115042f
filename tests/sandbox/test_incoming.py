"""How checked objects enter your store (flowd/vcs/incoming.py) and how flowd moves your story
branch after a take-in (flowd/vcs/ref_move.py), on real repositories: flowd's small packs are
rolled up and yours never touched, a refusal leaves no incoming store behind, incoming stores of
a process that is gone are removed, and a branch moves as git would move it (the lock, the old
value, both reflogs) or not at all."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flowd.engine.fingerprint import unlogged_move
from flowd.vcs import incoming, lane_repo, ref_move
from flowd.vcs.incoming import INCOMING, ROLL_UP, Refused, feed
from flowd.vcs.loose_objects import pack as _pack

ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, env={**os.environ, **ID})
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "a.txt").write_text("a\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    git(repo, "repack", "-q", "-d")  # your own pack
    return repo


def _packs(repo: Path) -> set[str]:
    return {n for n in os.listdir(repo / ".git" / "objects" / "pack") if n.endswith(".pack")}


def _blob(text: str) -> tuple[str, tuple[str, str, bytes, bytes]]:
    body = text.encode()
    name = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
    return name, (name[:2], name[2:], b"blob", body)


def test_flowds_packs_are_rolled_up_and_yours_never_touched(repo: Path) -> None:
    yours = _packs(repo)
    names = []
    for n in range(ROLL_UP * 2 + 3):
        name, loose = _blob(f"take-in {n}\n")
        feed(repo / ".git", _pack([loose]), repo / "q", ahead=True)
        names.append(name)
    now = _packs(repo)
    assert yours <= now, "a pack of yours was removed"
    # 35 take-ins: two rolled-up packs and the three since, not 35.
    assert len(now - yours) == 2 + 3, sorted(now)
    listed = git(repo, "cat-file", "--batch-check", data="".join(f"{n}\n" for n in names).encode())
    assert "missing" not in listed and listed.count(" blob ") == len(names)
    git(repo, "fsck", "--full", "--no-dangling")
    # The incoming stores are kept for the next take-ins (their gits started ahead, or not yet),
    # not one per take-in; with those gits ended, what is left of them is empty.
    stores = [n for n in os.listdir(repo / ".git" / "objects") if n.startswith(INCOMING)]
    assert len(stores) <= incoming.READY + 1, stores
    incoming.end_ready()
    for name in os.listdir(repo / ".git" / "objects"):
        if name.startswith(INCOMING):
            assert os.listdir(repo / ".git" / "objects" / name / "pack") == []


def _ready_gits(repo: Path) -> list[int]:
    """The pids of this process's children that are an `index-pack` of `repo` waiting."""
    found = []
    for task in os.listdir("/proc"):
        if not task.isdigit():
            continue
        try:
            argv = (Path("/proc") / task / "cmdline").read_bytes().split(b"\0")
            ppid = int((Path("/proc") / task / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"index-pack" in argv and str(repo / ".git").encode() in argv:
            found.append(int(task))
    return found


def _wait_ready(repo: Path) -> list[int]:
    for _ in range(500):
        pids = _ready_gits(repo)
        if pids:
            return pids
        time.sleep(0.01)
    raise AssertionError("no git was started ahead for the next take-in")


def test_the_next_take_ins_git_is_started_ahead_and_finds_packs_made_since(repo: Path) -> None:
    first, loose = _blob("first\n")
    feed(repo / ".git", _pack([loose]), repo / "q", ahead=True)
    ready = _wait_ready(repo)
    # Made after that git started: a blob in a pack of its own, and the first take-in's pack
    # repacked away; the ready git must find both (git looks again for what it misses).
    second = git(repo, "hash-object", "-w", "--stdin", data=b"second\n").strip()
    git(repo, "repack", "-q", "-a", "-d", "-k")  # one pack of all, unreachable kept
    assert "count: 0\n" in git(repo, "count-objects", "-v") and len(_packs(repo)) == 1
    tree = b"100644 a\0" + bytes.fromhex(first) + b"100644 b\0" + bytes.fromhex(second)
    name = hashlib.sha1(b"tree %d\0" % len(tree) + tree).hexdigest()
    feed(repo / ".git", _pack([(name[:2], name[2:], b"tree", tree)]), repo / "q", ahead=True)
    assert not set(ready) & set(_ready_gits(repo)), "the take-in did not use the git started ahead"
    assert git(repo, "cat-file", "-t", name).strip() == "tree"
    git(repo, "fsck", "--full", "--no-dangling")


def test_a_git_started_in_another_environment_is_not_used(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, loose = _blob("one\n")
    feed(repo / ".git", _pack([loose]), repo / "q", ahead=True)
    ready = _wait_ready(repo)
    monkeypatch.setenv("GIT_TRACE2_EVENT_NESTING", "3")  # any change of flowd's environment
    _, loose = _blob("two\n")
    feed(repo / ".git", _pack([loose]), repo / "q", ahead=True)
    for _ in range(500):  # ended, not left waiting
        if not set(ready) & set(_ready_gits(repo)):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the git started in the old environment was left waiting")
    git(repo, "fsck", "--full", "--no-dangling")


@pytest.mark.parametrize("ahead", [False, True], ids=["git-started-for-it", "git-started-ahead"])
def test_a_refusal_leaves_neither_objects_nor_an_incoming_store(repo: Path, ahead: bool) -> None:
    if ahead:
        _, loose = _blob("before\n")
        feed(repo / ".git", _pack([loose]), repo / "q", ahead=True)
        _wait_ready(repo)
    before = _packs(repo)
    tree = b"100644 f\0" + bytes.fromhex("2" * 40)  # names a blob nobody has
    name = hashlib.sha1(b"tree %d\0" % len(tree) + tree).hexdigest()
    with pytest.raises(Refused, match="git refused the objects of its store"):
        feed(repo / ".git", _pack([(name[:2], name[2:], b"tree", tree)]), repo / "q", ahead=True)
    assert _packs(repo) == before
    assert not (repo / ".git" / "objects" / name[:2] / name[2:]).exists()
    objects = repo / ".git" / "objects"
    if ahead:  # used, and no other started after a refusal
        assert _ready_gits(repo) == [], "the refusing git was not the one started ahead"
        incoming.end_ready()  # (it took the first take-in's store, given back empty)
    assert [n for n in os.listdir(objects) if n.startswith(INCOMING)] == []


def test_incoming_stores_of_a_gone_process_are_removed_a_live_ones_kept(repo: Path) -> None:
    objects = repo / ".git" / "objects"
    dead = subprocess.Popen(["true"])  # a pid that has ended
    dead.wait()
    (objects / f"{INCOMING}{dead.pid}-x" / "ab").mkdir(parents=True)
    (objects / f"{INCOMING}{os.getppid()}-y" / "pack").mkdir(parents=True)
    (objects / f"{INCOMING}{'9' * 30}-z").mkdir()  # no pid at all: kept until an hour old
    _, loose = _blob("after\n")
    feed(repo / ".git", _pack([loose]), repo / "q")
    left = sorted(n for n in os.listdir(objects) if n.startswith(INCOMING))
    assert f"{INCOMING}{dead.pid}-x" not in left and f"{INCOMING}{os.getppid()}-y" in left
    assert f"{INCOMING}{'9' * 30}-z" in left


def _reader(common: Path, ref: str) -> Callable[[], str | None]:
    return lambda: lane_repo.ref_value(common, ref)


def _commit(repo: Path, text: str) -> str:
    (repo / "a.txt").write_text(text, encoding="utf-8")
    git(repo, "add", "a.txt")
    head = git(repo, "rev-parse", "HEAD").strip()
    return git(repo, "commit-tree", git(repo, "write-tree").strip(), "-p", head, "-m", text).strip()


def test_a_branch_moves_as_git_moves_it_or_not_at_all(repo: Path) -> None:
    common = repo / ".git"
    git(repo, "branch", "story/ep/a")
    old = git(repo, "rev-parse", "story/ep/a").strip()
    new = _commit(repo, "moved\n")
    ref = "refs/heads/story/ep/a"
    # The old value checked under the lock: a branch that moved meanwhile is left as it is.
    with ref_move.locked(common, ref, new, _reader(common, ref)) as move:
        assert move is None
    # Another writer holds the lock (git itself, mid-update): nothing moves, its lock stays.
    (common / f"{ref}.lock").write_text("x\n", encoding="utf-8")
    with ref_move.locked(common, ref, old, _reader(common, ref)) as move:
        assert move is None
    assert (common / f"{ref}.lock").exists()
    (common / f"{ref}.lock").unlink()
    # A body that fails leaves the branch and no lock.
    with pytest.raises(RuntimeError), ref_move.locked(common, ref, old, _reader(common, ref)) as move:
        assert move is not None
        raise RuntimeError("read-tree failed")
    assert git(repo, "rev-parse", "story/ep/a").strip() == old and not (common / f"{ref}.lock").exists()
    # Moved: the value, the branch's reflog and the other log named, as git would write them.
    head_log = common / "logs" / "HEAD"
    before = head_log.read_bytes()
    (common / ref).chmod(0o664)  # a shared repository's group-writable branch stays so
    with ref_move.locked(common, ref, old, _reader(common, ref)) as move:
        assert move is not None
        move(new, "flowd: the lane's own commit", [head_log])
    assert git(repo, "rev-parse", "story/ep/a").strip() == new
    assert (common / ref).stat().st_mode & 0o777 == 0o664
    said = git(repo, "reflog", "-1", "--format=%H %gs", "story/ep/a").strip()
    assert said == f"{new} flowd: the lane's own commit"
    assert head_log.read_bytes().startswith(before)
    assert head_log.read_text().splitlines()[-1].startswith(f"{old} {new} ")
    assert unlogged_move(common, ref) is None  # detection sees a logged move, never blames
    git(repo, "fsck", "--full", "--no-dangling")


def test_a_branch_only_in_packed_refs_moves_too(repo: Path) -> None:
    common = repo / ".git"
    git(repo, "branch", "story/ep/b")
    git(repo, "pack-refs", "--all")
    old = git(repo, "rev-parse", "story/ep/b").strip()
    assert not (common / "refs" / "heads" / "story" / "ep" / "b").exists()
    new = _commit(repo, "packed\n")
    with ref_move.locked(
        common, "refs/heads/story/ep/b", old, _reader(common, "refs/heads/story/ep/b")
    ) as move:
        assert move is not None
        move(new, "flowd: the lane's own commit", [])
    assert git(repo, "rev-parse", "story/ep/b").strip() == new
