"""The quarantined object store (docs/sandbox.md "The quarantine"), on this machine's kernel: a
confined lane process cannot delete, overwrite or add anything of the repository's shared object
store, its own `git commit` works, flowd takes its commits in checked, and what fails the check
(a corrupt, malformed or disconnected object, a link in the quarantine's place) is refused with
nothing written to the shared store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import zlib
from collections.abc import Mapping
from pathlib import Path

import pytest

from flowd.engine.core.stops import StoryFailed
from flowd.engine.lane_objects import POLL_S, LaneObjects
from flowd.engine.state import EpicPaths
from flowd.events.model import Event, LaneEscape
from flowd.sandbox import landlock
from flowd.sandbox.confine import Confinement
from flowd.vcs import index_reset, lane_repo
from flowd.vcs import quarantine as quarantine_module
from flowd.vcs.incoming import Refused
from flowd.vcs.quarantine import quarantine, take_in

GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, ok: bool = True) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **GIT_ID, **(env or {})}
    )
    assert not ok or done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def lane(tmp_path: Path) -> Path:
    assert landlock.abi() >= 2, "these tests need the kernel's Landlock (Linux 5.19+, the LSM enabled)"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# r\n", encoding="utf-8")
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    # The user's own unpushed branch, its objects loose in the shared store.
    git(repo, "checkout", "-q", "-b", "mine")
    (repo / "mine.txt").write_text("the user's own work\n", encoding="utf-8")
    git(repo, "add", "mine.txt")
    git(repo, "commit", "-q", "-m", "mine")
    git(repo, "checkout", "-q", "main")
    git(repo, "repack", "-q")  # a pack as well as loose objects
    (repo / "later.txt").write_text("later\n", encoding="utf-8")
    git(repo, "add", "later.txt")
    git(repo, "commit", "-q", "-m", "later")
    wt = tmp_path / "repo.flowd" / "ep" / "a"
    git(repo, "worktree", "add", "-q", "-b", "story/ep/a", str(wt))
    (tmp_path / "home").mkdir()
    return wt


def _confinement(wt: Path) -> Confinement:
    root = wt.parents[2]
    return Confinement(
        "enforce", checkout=root / "repo", common_dir=root / "repo" / ".git", lanes_root=root / "repo.flowd",
        epic="ep", home=root / "home",
    )  # fmt: skip


def _sh(wt: Path, script: str) -> str:
    with _confinement(wt).spawn(wt) as confined:
        done = subprocess.run(
            confined.argv(["/bin/sh", "-c", script]),
            cwd=wt,
            env={**os.environ, **GIT_ID, **confined.env},
            pass_fds=confined.pass_fds,
            preexec_fn=confined.preexec_fn,
            capture_output=True,
            text=True,
        )
    return done.stdout + done.stderr


def _store(repo: Path) -> dict[str, bytes]:
    objects = repo / ".git" / "objects"
    return {str(p.relative_to(objects)): p.read_bytes() for p in sorted(objects.rglob("*")) if p.is_file()}


def _fsck(repo: Path) -> str:
    done = subprocess.run(
        ["git", "fsck", "--full", "--no-dangling"], cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_lane_cannot_touch_the_shared_store_and_still_commits(lane: Path) -> None:
    repo = lane.parents[2] / "repo"
    objects = repo / ".git" / "objects"
    mine = git(repo, "rev-parse", "mine").strip()
    loose = objects / mine[:2] / mine[2:]
    pack = next((objects / "pack").glob("*.pack"))
    before = _store(repo)
    attacks = [
        f"rm -f {loose}",
        f"chmod u+w {loose}; echo junk > {loose}",
        f"mv {loose} {loose}.gone",
        f"rm -f {pack}",
        f"chmod u+w {pack}; echo junk >> {pack}",
        f"echo {lane} >> {objects}/info/alternates",
        f"mkdir -p {objects}/info && echo x > {objects}/info/packs",
        f"echo x > {objects}/pack/pack-0000.pack",
        f"mkdir {objects}/zz",
        f"echo x > {objects}/{mine[:2]}/planted",
        f"GIT_OBJECT_DIRECTORY={objects} git hash-object -w README.md",
        f"ln -s {loose} {lane}/link && chmod u+w {lane}/link && echo junk > {lane}/link",
        f"git -C {repo} gc -q --prune=now",
    ]
    for attack in attacks:
        _sh(lane, attack)
    assert _store(repo) == before
    assert git(repo, "cat-file", "-p", f"{mine}:mine.txt") == "the user's own work\n"
    # The lane's own commit works, into its quarantine; the shared store is unchanged until flowd
    # takes it in, checked.
    out = _sh(lane, "echo x > new.txt && git add new.txt && git commit -q -m own && git log --format=%s -1")
    assert out.strip() == "own", out
    assert _store(repo) == before
    taken = take_in(repo / ".git", repo / ".git" / "worktrees" / "a")
    assert len(taken.names) == 3  # the blob, the tree, the commit
    assert lane_repo.take_branch(repo / ".git", repo / ".git" / "worktrees" / "a", lane)
    assert git(repo, "log", "--format=%s", "-1", "story/ep/a").strip() == "own"
    assert not any((quarantine(repo / ".git" / "worktrees" / "a")).rglob("*"))  # emptied
    _fsck(repo)


def _plant(q: Path, name: str, data: bytes) -> None:
    (q / name[:2]).mkdir(parents=True, exist_ok=True)
    (q / name[:2] / name[2:]).write_bytes(zlib.compress(data))


def _hash(repo: Path, kind: str, body: bytes, q: Path) -> str:
    env = {"GIT_OBJECT_DIRECTORY": str(q), "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects")}
    done = subprocess.run(
        ["git", "hash-object", "-t", kind, "-w", "--stdin", "--literally"],
        cwd=repo, input=body, capture_output=True, env={**os.environ, **env}, check=True,
    )  # fmt: skip
    return done.stdout.decode().strip()


_GITMODULES = b'[submodule "x"]\n\tpath = x\n\turl = ./x\n\tupdate = !touch /tmp/flowd-never\n'


def test_what_fails_the_check_is_refused_and_nothing_is_written(lane: Path) -> None:
    repo = lane.parents[2] / "repo"
    admin = repo / ".git" / "worktrees" / "a"
    q = quarantine(admin)
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    missing_parent = "1" * 40
    cases = {
        "disconnected": lambda: _hash(
            repo,
            "commit",
            f"tree {tree}\nparent {missing_parent}\nauthor a <a@a> 1 +0000\ncommitter a <a@a> 1 +0000\n\nx\n".encode(),
            q,
        ),
        "missing blob": lambda: _hash(repo, "tree", b"100644 f\0" + bytes.fromhex("2" * 40), q),
        "malformed": lambda: _hash(repo, "commit", b"garbage\n", q),
        # git checks `.gitmodules` blobs last, after it wrote what it received: the take-in's
        # incoming store keeps that out of the store until git is content.
        "a .gitmodules naming a command": lambda: _hash(
            repo, "tree", b"100644 .gitmodules\0" + bytes.fromhex(_hash(repo, "blob", _GITMODULES, q)), q
        ),
        "corrupt": lambda: _plant(q, "3" * 40, b"not zlib") or "",
        "misnamed": lambda: _plant(q, "4" * 40, b"blob 2\0hi") or "",
    }
    for what, make in cases.items():
        os.makedirs(q, exist_ok=True)
        before = _store(repo)
        make()
        if what == "corrupt":
            (q / "33" / ("3" * 38)).write_bytes(b"not zlib at all")
        with pytest.raises(Refused):
            take_in(repo / ".git", admin)
        assert _store(repo) == before, what
        subprocess.run(["rm", "-rf", str(q)], check=True)
    _fsck(repo)


def test_nothing_a_lane_wrote_is_followed(lane: Path, tmp_path: Path) -> None:
    repo = lane.parents[2] / "repo"
    admin = repo / ".git" / "worktrees" / "a"
    q = quarantine(admin)
    # A link in the quarantine's place (to the shared store itself): refused, the store untouched.
    os.rmdir(q) if q.is_dir() else None
    os.symlink(repo / ".git" / "objects", q)
    before = _store(repo)
    with pytest.raises(Refused):
        take_in(repo / ".git", admin)
    assert _store(repo) == before
    os.unlink(q)
    # An alternates file of its own is never read: a commit whose objects lie only elsewhere is
    # not taken as connected.
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    (other / "f").write_text("f\n", encoding="utf-8")
    git(other, "add", "f")
    git(other, "commit", "-q", "-m", "elsewhere")
    head = git(other, "rev-parse", "HEAD").strip()
    (q / "info").mkdir(parents=True)
    (q / "info" / "alternates").write_text(f"{other}/.git/objects\n", encoding="utf-8")
    (q / "xx").mkdir()
    os.symlink(other / ".git" / "objects" / head[:2], q / head[:2])
    with pytest.raises(Refused):
        take_in(repo / ".git", admin)
    assert _store(repo) == before


def test_flowd_refuses_a_lane_and_puts_its_branch_back(lane: Path) -> None:
    repo = lane.parents[2] / "repo"
    events: list[Event] = []
    paths = EpicPaths(repo / ".flow", "ep")
    objects = LaneObjects(repo / ".git", events.append, paths)
    objects.take("a", lane)  # the branch as flowd found it
    good = git(repo, "rev-parse", "story/ep/a").strip()
    out = _sh(lane, "echo x > new.txt && git add new.txt && git commit -q -m ok && echo OK")
    assert "OK" in out
    objects.take("a", lane)
    ok = git(repo, "rev-parse", "story/ep/a").strip()
    assert ok != good and git(repo, "cat-file", "-t", ok).strip() == "commit"
    # A commit whose parent exists nowhere, made the branch's tip by the lane's own git.
    tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    script = (
        f"c=$(printf 'tree {tree}\\nparent {'1' * 40}\\nauthor a <a@a> 1 +0000\\ncommitter a <a@a> 1 +0000\\n\\nx\\n'"
        " | git hash-object -t commit -w --stdin --literally) && git update-ref refs/heads/story/ep/a $c && echo OK"
    )
    assert "OK" in _sh(lane, script)
    with pytest.raises(StoryFailed, match="refused the objects story 'a' wrote"):
        objects.take("a", lane)
    assert git(repo, "rev-parse", "story/ep/a").strip() == ok
    escapes = [e for e in events if isinstance(e, LaneEscape)]
    assert [(e.lane, e.what, e.action) for e in escapes] == [("a", "gitObjects", "undone")]
    assert "## Objects refused" in paths.findings("a").read_text(encoding="utf-8")
    _fsck(repo)


def test_a_commit_is_taken_in_while_the_step_still_runs(lane: Path) -> None:
    """A `git fetch` or `git gc` in the user's checkout walks every branch: a lane's commit is in
    the shared store about a second after it is made, not only when the step ends."""
    repo = lane.parents[2] / "repo"
    objects = LaneObjects(repo / ".git", lambda _e: None, None)
    admin = repo / ".git" / "worktrees" / "a"
    seen: list[str] = []

    async def step() -> None:
        async with objects.step("a", lane, contextlib.nullcontext()):
            out = await asyncio.to_thread(
                _sh, lane, "echo x > new.txt && git add new.txt && git commit -q -m mid"
            )
            assert out == "", out
            await asyncio.sleep(POLL_S * 2.5)
            seen.append(_fsck(repo))  # mid-step: the branch's new commit is already in the store
            seen.append(str(len([p for p in quarantine(admin).rglob("*") if p.is_file()])))

    asyncio.run(step())
    assert seen[1] == "3"  # kept in the quarantine while the step ran (the lane's git may read it)
    assert git(repo, "log", "--format=%s", "-1", "story/ep/a").strip() == "mid"
    assert not [p for p in quarantine(admin).rglob("*") if p.is_file()]  # removed when it ended


def test_a_refusal_never_moves_a_branch_of_the_users(lane: Path) -> None:
    """A lane pointing its HEAD at your branch, then refused: flowd puts back only what names a
    missing object, and only its own HEAD or a story branch; your branch stays where you left it."""
    repo = lane.parents[2] / "repo"
    objects = LaneObjects(repo / ".git", lambda _e: None, None)
    assert "OK" in _sh(lane, "git symbolic-ref HEAD refs/heads/mine && echo OK")
    objects.take("a", lane)  # flowd sees `mine` through the lane's HEAD
    yours = git(repo, "commit-tree", "mine^{tree}", "-p", "mine", "-m", "mine again").strip()
    git(repo, "update-ref", "refs/heads/mine", yours)  # the user moves their branch on
    _plant(quarantine(repo / ".git" / "worktrees" / "a"), "5" * 40, b"blob 2\0hi")  # misnamed
    with pytest.raises(StoryFailed):
        objects.take("a", lane)
    assert git(repo, "rev-parse", "mine").strip() == yours
    _fsck(repo)


def test_a_pack_and_many_objects_are_taken_in_through_index_pack(lane: Path) -> None:
    """A lane's `git repack` leaves a pack in its quarantine; a big commit is more objects than git
    unpacks loose (100): both go through `index-pack --strict` and come in whole."""
    repo = lane.parents[2] / "repo"
    admin = repo / ".git" / "worktrees" / "a"
    out = _sh(
        lane, "echo 1 > p.txt && git add p.txt && git commit -q -m packed && git repack -q -d -l && echo OK"
    )
    assert "OK" in out, out
    assert list((quarantine(admin) / "pack").glob("pack-*.pack"))
    many = (
        "for i in $(seq 1 150); do echo $i > m$i.txt; done && git add -A && git commit -q -m many && echo OK"
    )
    assert "OK" in _sh(lane, many)
    taken = take_in(repo / ".git", admin)
    assert len(taken.packs) == 1 and len(taken.names) > 100
    assert lane_repo.take_branch(repo / ".git", admin, lane)
    assert git(repo, "log", "--format=%s", "story/ep/a").split() == ["many", "packed", "later", "init"]
    left = [p.name for p in quarantine(admin).rglob("*") if p.is_file()]
    assert left == ["packs"]  # `info/packs`, repack's list: never read by flowd, nothing taken
    _fsck(repo)


def test_a_new_run_takes_in_what_a_killed_run_left(lane: Path) -> None:
    """A run killed mid-step leaves the lane's commit in its quarantine: the next run's first step
    of the lane takes it in before anything else of flowd's reads the lane."""
    repo = lane.parents[2] / "repo"
    assert "OK" in _sh(lane, "echo x > left.txt && git add left.txt && git commit -q -m left && echo OK")
    resumed = LaneObjects(repo / ".git", lambda _e: None, None)  # a new run: it knows nothing yet

    async def step() -> None:
        async with resumed.step("a", lane, contextlib.nullcontext()):
            assert git(repo, "log", "--format=%s", "-1", "story/ep/a").strip() == "left"

    asyncio.run(step())
    _fsck(repo)


def test_the_index_after_a_take_in_is_read_without_git_as_git_reads_it(
    lane: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's own commit (a file changed deep down, one added, one removed), taken in: flowd's
    index of the worktree is read from it in-process (flowd/vcs/index_reset.py), entry for entry
    what `git read-tree --reset` makes of the index before, and flowd's git finds it clean."""
    repo = lane.parents[2] / "repo"
    admin = repo / ".git" / "worktrees" / "a"
    objects = LaneObjects(repo / ".git", lambda _e: None, None)
    assert "OK" in _sh(lane, "mkdir -p src/deep && echo 1 > src/deep/x.py && echo 2 > src/y.py && git add -A "
                       "&& git commit -q -m first && echo OK")  # fmt: skip
    objects.take("a", lane)
    before = admin / "before"
    before.write_bytes((admin / "index").read_bytes())
    script = "echo changed > src/deep/x.py && echo new > src/z.py && git rm -q README.md && git add -A"
    assert "OK" in _sh(lane, f"{script} && git commit -q -m second && echo OK")
    answers: list[bool] = []
    reset = index_reset.reset

    def spied(old: index_reset.Index, commit: str, held: Mapping[str, bytes]) -> bytes | None:
        answer = reset(old, commit, held)
        answers.append(answer is not None)
        return answer

    monkeypatch.setattr(index_reset, "reset", spied)

    objects.take("a", lane)

    assert answers == [True]  # read without git
    pinned = ["--git-dir", str(admin), "--work-tree", str(lane)]
    new = git(repo, "rev-parse", "story/ep/a").strip()
    env = {"GIT_COMMON_DIR": str(repo / ".git"), "GIT_INDEX_FILE": str(before)}
    git(repo, *pinned, "read-tree", "--reset", new, env=env)
    assert git(repo, *pinned, "ls-files", "-s", env={"GIT_COMMON_DIR": str(repo / ".git")}) == git(
        repo, *pinned, "ls-files", "-s", env=env
    )
    assert (
        git(repo, *pinned, "write-tree", env={"GIT_COMMON_DIR": str(repo / ".git")}).strip()
        == git(repo, "rev-parse", f"{new}^{{tree}}").strip()
    )
    assert git(lane, "status", "--porcelain") == ""
    _fsck(repo)


def test_a_reflogs_entries_naming_missing_objects_are_dropped_and_a_huge_one_is_not_read(lane: Path) -> None:
    """After a refusal, the entries of a reflog naming objects the store does not hold are dropped
    (git's fsck calls them invalid); a reflog past `REFLOG_MAX` (the lane's git wrote it) is left
    as it is rather than read whole into flowd's memory."""
    repo = lane.parent.parent.parent / "repo"
    head = git(repo, "rev-parse", "HEAD").strip()
    log = repo / ".git" / "logs" / "refs" / "heads" / "story" / "ep" / "a"
    good = f"{'0' * 40} {head} t <t@t> 1 +0000\tbranch: Created\n"
    bad = f"{head} {'e' * 40} t <t@t> 2 +0000\tcommit: refused\n"
    log.write_text(good + bad, encoding="utf-8")
    assert quarantine_module.drop_missing_entries(repo / ".git", log)
    assert log.read_text(encoding="utf-8") == good
    with open(log, "ab") as handle:
        handle.truncate(quarantine_module.REFLOG_MAX + 1)  # sparse: no disk, every byte zero
    before = os.stat(log)
    assert not quarantine_module.drop_missing_entries(repo / ".git", log)
    after = os.stat(log)
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)


def test_a_cancel_while_the_step_ends_is_not_lost(lane: Path) -> None:
    """The story is cancelled (fail-fast, a stop) just as its step ends, while the step waits for
    the poll's take-in in flight: the cancel goes on after the step's last take-in (it was
    swallowed, and a story fail-fast had stopped went on to its next turn)."""
    repo = lane.parents[2] / "repo"
    objects = LaneObjects(repo / ".git", lambda _e: None, None)
    took = objects.take
    polled = threading.Event()
    cancelled = threading.Event()
    ends: list[str] = []

    def slow_take(lane_id: str, home: Path, *, during: bool = False) -> None:
        if during:
            polled.set()
            # The poll's take-in stays in flight until the cancel has landed: no timing decides
            # whether the test meets the moment it is about.
            assert cancelled.wait(30), "the test never cancelled the step"
        took(lane_id, home, during=during)
        ends.append("during" if during else "whole")

    objects.take = slow_take  # type: ignore[method-assign]
    body_ended = asyncio.Event()

    async def step() -> None:
        async with objects.step("a", lane, contextlib.nullcontext()):
            await asyncio.to_thread(
                _sh, lane, "echo x > late.txt && git add late.txt && git commit -q -m late"
            )
            await asyncio.to_thread(polled.wait)
            body_ended.set()  # the step's end runs on, up to its wait for the poll

    async def main() -> None:
        task = asyncio.create_task(step())
        await body_ended.wait()
        task.cancel()
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ends.count("whole") == 2, ends  # before the step, and its last, before the cancel went on
    assert git(repo, "log", "--format=%s", "-1", "story/ep/a").strip() == "late"
