"""A confined lane's own git works in a lane repository of its own (docs/sandbox.md "The lane
repository"): an agent's `git commit` moves only that repository's branch, so right after it,
before flowd takes anything in, your repository's refs, worktree HEADs and indexes name only
objects it holds (`git fsck`, `git gc`, a fetch's connectivity walk pass); no lane can write a
ref of the shared refs directory; flowd's take-in moves the story branch, and flowd's own commit
after the task reaches the lane's git before its next step."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from flowd.engine.fingerprint import unlogged_move
from flowd.engine.lane_objects import LaneObjects
from flowd.events.model import Event
from flowd.sandbox import landlock
from flowd.sandbox.confine import Confinement, active
from flowd.vcs import lane_repo
from flowd.vcs.admin import check_admin
from flowd.vcs.gitcli import GitError, private_git_dir
from flowd.vcs.gitops import Repo

GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def make_repo(tmp_path: Path, stories: tuple[str, ...]) -> Repo:
    """A repository with one commit and a worktree per story of epic `ep`, and a home folder."""
    assert landlock.abi() >= 2, "these tests need the kernel's Landlock (Linux 5.19+)"
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text("# r\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True)
    repo = Repo(root)
    for story in stories:
        repo.worktree_add(tmp_path / "repo.flowd" / "ep" / story, f"story/ep/{story}", "main")
    (tmp_path / "home").mkdir()
    return repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path, ("a", "b"))


def _confinement(repo: Repo) -> Confinement:
    lanes = repo.root.parent / "repo.flowd"
    return Confinement(
        "enforce", checkout=repo.root, common_dir=repo.common_dir, lanes_root=lanes, epic="ep",
        home=repo.root.parent / "home", allow_read=[], allow_write=[],
    )  # fmt: skip


def _sh(c: Confinement, wt: Path, script: str) -> subprocess.CompletedProcess[str]:
    with c.spawn(wt) as confined:
        return subprocess.run(
            confined.argv(["/bin/sh", "-c", script]), cwd=wt, env={**os.environ, **GIT_ID, **confined.env},
            pass_fds=confined.pass_fds, preexec_fn=confined.preexec_fn, capture_output=True, text=True,
        )  # fmt: skip


def _git(repo: Repo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo.root, capture_output=True, text=True)


def _admin(wt: Path) -> Path:
    admin = private_git_dir(wt)
    assert admin is not None
    return admin


def _story_refs(repo: Repo) -> dict[str, bytes]:
    folder = repo.common_dir / "refs" / "heads" / "story" / "ep"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_an_agents_own_commit_leaves_your_repository_whole_until_flowd_takes_it_in(repo: Repo) -> None:
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    c = _confinement(repo)
    before = _git(repo, "rev-parse", "story/ep/a").stdout.strip()
    done = _sh(
        c,
        a,
        "echo x > new.txt && git add new.txt && git commit -q -m 'by its agent' && git log -1 --format=%s",
    )
    assert done.returncode == 0 and done.stdout.strip() == "by its agent", done.stdout + done.stderr
    made = _git(repo, "rev-parse", "story/ep/a").stdout.strip()
    # Before any take-in: the commit is the lane repository's alone; yours names nothing missing.
    assert made == before
    for check in (
        ["fsck", "--full", "--no-dangling"],
        ["rev-list", "--all", "--indexed-objects"],
        ["gc", "--auto"],
    ):
        proc = _git(repo, *check)
        assert proc.returncode == 0, (check, proc.stdout + proc.stderr)
    # The lane's git writes no file of the shared refs directory: the kernel refuses each.
    refs = _story_refs(repo)
    shared = repo.common_dir / "refs" / "heads" / "story" / "ep"
    tries = (f"echo {made} > {shared}/a", f"echo {made} > {shared}/b", f"echo {made} > {shared}/new",
             f"rm -f {shared}/b", f"GIT_DIR={repo.common_dir} git update-ref refs/heads/story/ep/a HEAD")  # fmt: skip
    for attempt in tries:
        out = _sh(c, a, attempt)
        assert out.returncode != 0 and "denied" in (out.stdout + out.stderr).lower(), (attempt, out.stderr)
    assert _story_refs(repo) == refs
    # flowd's take-in: the objects checked and moved in, the story branch follows the lane's.
    events: list[Event] = []
    objects = LaneObjects(repo.common_dir, events.append, None)
    objects.take("a", a)
    taken = _git(repo, "log", "-1", "--format=%s", "story/ep/a").stdout.strip()
    assert taken == "by its agent" and events == []
    assert _git(repo, "fsck", "--full", "--no-dangling").returncode == 0
    assert repo.status_paths(a) == []  # flowd's own index read from the new commit
    # Moved as git moves a branch: its reflog and the worktree's HEAD log name the lane's commit,
    # no lock is left, detection sees a logged move.
    now = _git(repo, "rev-parse", "story/ep/a").stdout.strip()
    said = _git(repo, "reflog", "-1", "--format=%H %gs", "story/ep/a").stdout.strip()
    assert now != made and said == f"{now} {lane_repo.REFLOG_ACTION}"
    assert (_admin(a) / "logs" / "HEAD").read_text().splitlines()[-1].split()[:2] == [made, now]
    assert unlogged_move(repo.common_dir, "refs/heads/story/ep/a") is None
    assert not (repo.common_dir / "refs" / "heads" / "story" / "ep" / "a.lock").exists()
    # flowd's own commit after the task, then the lane's git sees it before its next step.
    (a / "more.txt").write_text("more\n", encoding="utf-8")
    flowd_commit = repo.commit_all(a, "flowd: the task")
    assert flowd_commit is not None
    lane_repo.sync(repo.common_dir, _admin(a), a)
    again = _sh(
        c, a, "git status --short && git log -1 --format=%s && echo y >> more.txt && git commit -qam again"
    )
    assert again.returncode == 0 and again.stdout.splitlines() == ["flowd: the task"], (
        again.stdout + again.stderr
    )
    objects.take("a", a)
    assert _git(repo, "log", "-2", "--format=%s", "story/ep/a").stdout.split("\n")[:2] == [
        "again",
        "flowd: the task",
    ]
    assert _git(repo, "fsck", "--full", "--no-dangling").returncode == 0


def test_a_lane_repository_survives_flowds_worktree_commands(repo: Repo) -> None:
    """git's `worktree move`/`repair`/`remove` check that a worktree's `.git` names its admin dir:
    flowd points it back for them and at the lane repository again after; detection takes the
    lane repository's `.git` as the right one and puts back one naming anything else."""
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    c = _confinement(repo)
    assert _sh(c, a, "true").returncode == 0
    admin = _admin(a)
    assert (a / ".git").read_text(encoding="utf-8") == f"gitdir: {admin / 'flowd-git'}\n"
    assert check_admin(repo.common_dir, a) == []
    moved = repo.worktree_move(a, a.parent / "a2")
    assert (moved / ".git").read_text(encoding="utf-8") == f"gitdir: {admin / 'flowd-git'}\n"
    assert check_admin(repo.common_dir, moved) == []
    # A `.git` naming its own admin dir is flowd's passing state (between making the lane
    # repository and naming it, or named away for git's `worktree move`): detection, which may
    # look at that moment from another lane's step, blames no one; the next step names the lane
    # repository again. (Written by a lane, it only keeps the lane's git out of a dir it cannot
    # write.) Anything else there is put back and said.
    (moved / ".git").write_text(f"gitdir: {admin}\n", encoding="utf-8")
    assert check_admin(repo.common_dir, moved) == []
    assert _sh(c, moved, "true").returncode == 0
    # The other way round: the lane repository named while no lane repository is there yet.
    (admin / "flowd-git").rename(admin / "flowd-git.aside")
    assert check_admin(repo.common_dir, moved) == []
    (admin / "flowd-git.aside").rename(admin / "flowd-git")
    assert (moved / ".git").read_text(encoding="utf-8") == f"gitdir: {admin / 'flowd-git'}\n"
    (moved / ".git").write_text(f"gitdir: {moved.parent}\n", encoding="utf-8")
    assert [p.path.name for p in check_admin(repo.common_dir, moved)] == [".git"]
    assert (moved / ".git").read_text(encoding="utf-8") == f"gitdir: {admin / 'flowd-git'}\n"
    repo.worktree_remove(moved, force=True)
    assert not moved.exists() and not admin.exists()


def test_flowds_own_commit_of_what_a_lane_wrote_is_checked_as_a_take_in(repo: Repo) -> None:
    """flowd's own `git add`/`commit` of a lane's files hashes them in a store of its own and
    takes them in checked: a `.gitmodules` naming a command (that the lane only wrote, never
    staged) is refused, the index put back, and nothing of it reaches your store."""
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    before = _git(repo, "rev-parse", "story/ep/a").stdout.strip()
    (a / ".gitmodules").write_text(
        '[submodule "s"]\n\tpath = s\n\turl = ./s\n\tupdate = !touch /tmp/flowd-never\n', encoding="utf-8"
    )
    (a / "ok.txt").write_text("ok\n", encoding="utf-8")
    with pytest.raises(GitError, match="gitmodulesUpdate"):
        repo.commit_all(a, "flowd: the task")
    assert _git(repo, "rev-parse", "story/ep/a").stdout.strip() == before
    fsck = _git(repo, "fsck", "--full")
    assert fsck.returncode == 0 and "gitmodules" not in fsck.stdout + fsck.stderr, fsck.stdout + fsck.stderr
    assert _git(repo, "-C", str(a), "diff", "--cached", "--name-only").stdout == ""  # the index put back
    (a / ".gitmodules").unlink()
    assert repo.commit_all(a, "flowd: the task") is not None
    assert _git(repo, "show", "--name-only", "--format=", "story/ep/a").stdout.split() == ["ok.txt"]
    assert _git(repo, "fsck", "--full", "--no-dangling").returncode == 0


def test_a_lane_run_unconfined_later_has_no_lane_repository(repo: Repo) -> None:
    """A lane confined in one run and run under `detect` in the next: its step's start drops the
    lane repository (its `.git` names its admin dir again), so its unconfined git writes where
    flowd's own does."""
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    assert _sh(_confinement(repo), a, "true").returncode == 0
    admin = _admin(a)
    assert lane_repo.active(admin)
    detect = Confinement(
        "detect", checkout=repo.root, common_dir=repo.common_dir, lanes_root=repo.root.parent / "repo.flowd",
        epic="ep", home=repo.root.parent / "home", allow_read=[], allow_write=[],
    )  # fmt: skip
    objects = LaneObjects(repo.common_dir, lambda _e: None, None)

    async def one_step() -> None:
        async with objects.step("a", a, contextlib.nullcontext()):
            pass

    with active(detect):
        asyncio.run(one_step())
    assert not lane_repo.active(admin) and not (admin / lane_repo.LANE_GIT).exists()
    assert (a / ".git").read_text(encoding="utf-8") == f"gitdir: {admin}\n"
    assert check_admin(repo.common_dir, a) == []
    (a / "x.txt").write_text("x\n", encoding="utf-8")
    subprocess.run(["git", "add", "x.txt"], cwd=a, check=True)
    subprocess.run(
        ["git", "commit", "-q", "-m", "unconfined"], cwd=a, check=True, env={**os.environ, **GIT_ID}
    )
    assert _git(repo, "log", "-1", "--format=%s", "story/ep/a").stdout.strip() == "unconfined"


def test_from_a_lanes_worktree_flowd_finds_your_repository(repo: Repo) -> None:
    """While its lane runs, git in a story's worktree reports the lane repository as its common
    dir; your own git works there, and flowd's CLI, server and forwarder still find your
    repository and its main checkout."""
    from flowd.daemon.forward import main_checkout as forwarded_root
    from flowd.server.hub import main_checkout

    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    done = _sh(_confinement(repo), a, "git rev-parse --path-format=absolute --git-common-dir")
    assert done.stdout.strip().endswith("/worktrees/a/flowd-git"), done.stdout + done.stderr
    # Your own git there, without the lane's environment, reads the same objects.
    for args in (["log", "-1", "--format=%s"], ["status", "--short"]):
        yours = subprocess.run(["git", *args], cwd=a, capture_output=True, text=True)
        assert yours.returncode == 0, (args, yours.stderr)
    found = Repo.discover(a / "README.md")
    assert (found.root, found.git_dir, found.common_dir) == (a, _admin(a), repo.common_dir)
    assert main_checkout(a).root == repo.root
    assert forwarded_root(a) == repo.root


def test_a_hard_linked_index_is_given_a_file_of_its_own_byte_for_byte(repo: Repo) -> None:
    """A hard link among the admin files is unshared (detection, docs/sandbox.md "flowd's own
    git"): the worktree's `index` is binary, and its copy keeps every byte (it was decoded as text
    and encoded again, which a byte no UTF-8 holds made a crash)."""
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    index = _admin(a) / "index"
    data = index.read_bytes()
    assert any(b >= 0x80 for b in data)  # the index's hash and stat data are binary
    other = repo.root.parent / "linked"
    os.link(index, other)

    found = check_admin(repo.common_dir, a)

    assert [(p.path.name, p.why, p.put_back) for p in found] == [
        ("index", "is a hard link to another file", True)
    ]
    assert index.stat().st_nlink == 1 and index.read_bytes() == data == other.read_bytes()


def test_the_record_is_written_over_cut_to_its_length_and_a_shared_one_replaced(tmp_path: Path) -> None:
    """The lane repository's record is written over in place (no new file per take-in), cut when
    the last one was longer; a record hard-linked elsewhere is replaced, never written through."""
    admin = tmp_path / "admin"
    admin.mkdir()
    long = lane_repo._Side(
        "ref: refs/heads/story/ep/" + "x" * 200, "refs/heads/story/ep/" + "x" * 200, "a" * 40
    )
    lane_repo._write_record(admin, long, "b" * 40)
    record = admin / lane_repo.RECORD
    inode = record.stat().st_ino
    short = lane_repo._Side("ref: refs/heads/story/ep/a", "refs/heads/story/ep/a", "c" * 40)
    lane_repo._write_record(admin, short, "d" * 40)
    assert lane_repo._record(admin) == {"head": short.head, "sha": "c" * 40, "lane": "d" * 40}
    assert record.stat().st_ino == inode
    outside = tmp_path / "outside"
    os.link(record, outside)
    lane_repo._write_record(admin, long, "e" * 40)
    assert lane_repo._record(admin)["lane"] == "e" * 40
    assert b'"lane": "dddd' in outside.read_bytes() and record.stat().st_ino != inode


def test_an_agents_commit_works_where_you_sign_yours(repo: Repo) -> None:
    """Your global and repository config sign every commit and tag; no key or agent is reachable
    from a lane, so the lane's own `git commit` and `git tag -a` run unsigned instead of failing."""
    home = repo.root.parent / "home"
    (home / ".gitconfig").write_text(
        "[user]\n\tsigningkey = ABCDEF\n[commit]\n\tgpgSign = true\n[tag]\n\tgpgSign = true\n"
        "[gpg]\n\tprogram = false\n",
        encoding="utf-8",
    )
    subprocess.run(["git", "config", "commit.gpgSign", "true"], cwd=repo.root, check=True)
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    done = _sh(
        _confinement(repo),
        a,
        f"export HOME={home} && echo x > signed.txt && git add signed.txt && git commit -q -m mine "
        "&& git tag -a -m t v1 && git log -1 --format='%s %G?'",
    )
    assert done.returncode == 0 and done.stdout.strip() == "mine N", done.stdout + done.stderr


@pytest.mark.parametrize(
    "where", ["your .git/hooks", "your repository's core.hooksPath", "your global core.hooksPath"]
)
def test_an_agents_own_commit_runs_your_hooks_as_in_your_checkout(
    repo: Repo, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hooks git would run for a commit in your checkout run for the lane's own commit (the
    lane repository is a git dir of its own: your `.git/hooks` never ran there)."""
    home = repo.root.parent / "home"
    if where == "your .git/hooks":
        folder = repo.common_dir / "hooks"
    elif where == "your repository's core.hooksPath":
        # Relative: the worktree's own `.husky` (committed, in husky's way).
        folder = repo.root.parent / "repo.flowd" / "ep" / "a" / ".husky"
        subprocess.run(["git", "config", "core.hooksPath", ".husky"], cwd=repo.root, check=True)
    else:
        # Named in a file your global config includes for this repository only (work hooks).
        folder = repo.root.parent / "global-hooks"
        (home / "work.gitconfig").write_text(f"[core]\n\thooksPath = {folder}\n", encoding="utf-8")
        (home / ".gitconfig").write_text(
            f'[includeIf "gitdir:{repo.root}/"]\n\tpath = {home / "work.gitconfig"}\n', encoding="utf-8"
        )
    folder.mkdir(exist_ok=True)
    hook = folder / "pre-commit"
    hook.write_text(f'#!/bin/sh\necho "refused by {where}" >&2\nexit 1\n', encoding="utf-8")
    hook.chmod(0o755)
    if where != "your .git/hooks":  # a hook there too, which git would not run
        (repo.common_dir / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        (repo.common_dir / "hooks" / "pre-commit").chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setattr(lane_repo, "_HOOKS_ABOVE", {})
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    done = _sh(
        _confinement(repo),
        a,
        f"export HOME={home} && echo x > h.txt && git add h.txt && git commit -q -m mine",
    )
    assert done.returncode != 0 and f"refused by {where}" in done.stderr, done.stdout + done.stderr


def test_the_lanes_git_reads_your_exclude_and_attributes_files(repo: Repo) -> None:
    """`.git/info/exclude` and `.git/info/attributes` are read from the git dir git works in: the
    lane repository has your copies (before, an agent's `git add -A` committed what you exclude
    there), and none once you remove yours."""
    info = repo.common_dir / "info"
    info.mkdir(exist_ok=True)
    (info / "exclude").write_text("*.log\n.env\n", encoding="utf-8")
    (info / "attributes").write_text("*.bin binary\n", encoding="utf-8")
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    c = _confinement(repo)
    script = (
        "echo x > debug.log && echo s=1 > .env && echo k > keep.txt && git add -A "
        "&& git diff --cached --name-only && git check-attr diff -- x.bin"
    )
    done = _sh(c, a, script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["keep.txt", "x.bin: diff: unset"]
    (info / "exclude").unlink()
    lane_repo.sync(repo.common_dir, _admin(a), a, force=True)
    done = _sh(c, a, "git add -A && git diff --cached --name-only")
    assert done.stdout.split() == [".env", "debug.log", "keep.txt"], done.stderr


def test_the_lanes_index_copy_keeps_its_time_so_a_same_size_edit_shows(repo: Repo) -> None:
    """The lane repository's index is a copy of the worktree's. git reads an entry whose file
    changed in the second the index was written as racily clean, knowing that second from the
    index file's time: a copy with a later time hid a same-size edit from the lane's git (with
    `core.trustctime` off, or where times tick coarsely)."""
    a = repo.root.parent / "repo.flowd" / "ep" / "a"
    admin, c = _admin(a), _confinement(repo)
    assert _sh(c, a, "true").returncode == 0  # the lane repository made
    _git(repo, "config", "core.trustctime", "false")
    name = _git(repo, "-C", str(a), "ls-files").stdout.split()[0]
    tracked = a / name
    second = (int(time.time()) - 5) * 1_000_000_000
    os.utime(tracked, ns=(second, second))
    pinned = ["--git-dir", str(admin), "--work-tree", str(a), "update-index", "-q", "--refresh"]
    subprocess.run(["git", *pinned], env={**os.environ, "GIT_COMMON_DIR": str(repo.common_dir)}, check=True)
    os.utime(admin / "index", ns=(second, second))  # the entry is racily clean
    data = tracked.read_bytes()
    tracked.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # the same size, in the same second
    os.utime(tracked, ns=(second, second))
    lane_repo.sync(repo.common_dir, admin, a, force=True)
    done = _sh(c, a, "git status --porcelain")
    assert done.stdout.splitlines() == [f" M {name}"], (done.stdout, done.stderr)
