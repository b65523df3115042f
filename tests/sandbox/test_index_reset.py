"""The worktree's index read from a commit without git (flowd/vcs/index_reset.py), against git's
own `read-tree --reset` on real repositories: the same entries, stat for stat; a cache tree git's
`write-tree` trusts; racy entries left for a status to read; and every index or commit it leaves
to git declined."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from flowd.vcs import index_reset

ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}
PAST = 1_600_000_000  # files older than any index written here: no entry is racy


def git(repo: Path, *args: str, index: Path | None = None) -> str:
    env = {**os.environ, **ID}
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (PAST, PAST))


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def held(repo: Path, old: str, new: str) -> dict[str, bytes]:
    """The commits and trees `new` has that `old` has not, by name (what a take-in read)."""
    out: dict[str, bytes] = {}
    for line in git(repo, "rev-list", "--objects", f"{old}..{new}").splitlines():
        name = line.split(" ", 1)[0]
        kind = git(repo, "cat-file", "-t", name).strip()
        if kind in ("commit", "tree"):
            done = subprocess.run(["git", "cat-file", kind, name], cwd=repo, capture_output=True, check=True)
            out[name] = done.stdout
    return out


def by_git(repo: Path, index: Path, commit: str) -> str:
    """`ls-files --debug` of `index` after git's own `read-tree --reset commit` (on a copy)."""
    copy = index.with_name("by-git")
    copy.write_bytes(index.read_bytes())
    os.utime(copy, ns=(os.stat(index).st_mtime_ns,) * 2)
    git(repo, "read-tree", "--reset", commit, index=copy)
    return git(repo, "ls-files", "-s", "--debug", index=copy)


def ours(repo: Path, index: Path, commit: str, objects: dict[str, bytes]) -> bytes:
    old = index_reset.read(index)
    assert old is not None
    new = index_reset.reset(old, commit, objects)
    assert new is not None, "declined an index and commit it reads"
    return new


@pytest.fixture(params=["sha1", "sha256"])
def repo(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", f"--object-format={request.param}", str(repo))
    for rel in ("a.txt", "src/b.py", "src/deep/c.py", "src/deep/d.py", "docs/e.md", "z/f", "x.c"):
        write(repo, rel, rel + "\n")
    os.symlink("a.txt", repo / "link")
    os.utime(repo / "link", (PAST, PAST), follow_symlinks=False)
    (repo / "src" / "run.sh").write_text("#!/bin/sh\n", encoding="utf-8")
    os.chmod(repo / "src" / "run.sh", 0o755)
    os.utime(repo / "src" / "run.sh", (PAST, PAST))
    commit(repo, "init")
    (repo / "vendor" / "lib").mkdir(parents=True)  # a submodule not checked out
    width = len(git(repo, "rev-parse", "HEAD").strip())
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * width},vendor/lib")
    git(repo, "commit", "-q", "-m", "a submodule link")
    git(repo, "read-tree", "--reset", "HEAD")  # the index as flowd's adopt leaves it (a full cache tree)
    return repo


def test_the_index_is_git_s_own_entry_for_entry(repo: Path) -> None:
    index = repo / ".git" / "index"
    old = git(repo, "rev-parse", "HEAD").strip()
    write(repo, "src/deep/c.py", "changed\n")  # a file deep down, its siblings kept
    write(repo, "src/new/g.py", "new\n")  # a new folder
    (repo / "docs" / "e.md").unlink()  # a folder gone
    write(repo, "a-b", "sorts between a.txt's folder peers\n")
    os.chmod(repo / "x.c", 0o755)  # a mode changed, the object not
    os.utime(repo / "x.c", (PAST, PAST))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "changes")
    new = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "read-tree", "--reset", old)  # the index back at the old commit, as before a take-in
    expected = by_git(repo, index, new)

    index.write_bytes(ours(repo, index, new, held(repo, old, new)))

    assert git(repo, "ls-files", "-s", "--debug") == expected
    assert git(repo, "write-tree").strip() == git(repo, "rev-parse", f"{new}^{{tree}}").strip()
    assert git(repo, "status", "--porcelain") == ""


def test_its_cache_tree_is_one_git_trusts_after_a_change(repo: Path) -> None:
    """`write-tree` builds only what a change invalidated from the cache tree: a wrong object
    recorded for any other folder would make a wrong tree here."""
    old = git(repo, "rev-parse", "HEAD").strip()
    rng = random.Random(7)
    index = repo / ".git" / "index"
    for step in range(6):
        for rel in rng.sample(["a.txt", "src/b.py", "src/deep/c.py", "src/deep/d.py", "z/f", "x.c"], 2):
            write(repo, rel, f"{step} {rel}\n")
        new = commit(repo, f"step {step}")
        git(repo, "read-tree", "--reset", old)
        index.write_bytes(ours(repo, index, new, held(repo, old, new)))  # the next one reuses its cache tree
        write(repo, "src/deep/d.py", f"{step} unstaged\n")
        git(repo, "add", "src/deep/d.py")
        from_cache = git(repo, "write-tree").strip()
        fresh = repo / ".git" / "fresh"
        git(repo, "read-tree", "--reset", new, index=fresh)
        git(repo, "add", "src/deep/d.py", index=fresh)
        assert from_cache == git(repo, "write-tree", index=fresh).strip()
        git(repo, "reset", "-q", "src/deep/d.py")
        git(repo, "checkout", "-q", "--", "src/deep/d.py")
        old = new


def test_a_racy_entry_loses_its_size_so_a_status_reads_the_file(repo: Path) -> None:
    index = repo / ".git" / "index"
    old = git(repo, "rev-parse", "HEAD").strip()
    write(repo, "src/b.py", "changed\n")
    new = commit(repo, "b")
    git(repo, "read-tree", "--reset", old)
    later = os.stat(index).st_mtime + 100
    os.utime(repo / "a.txt", (later, later))
    git(repo, "update-index", "-q", "--refresh")  # a.txt's entry now carries a time newer than the index

    index.write_bytes(ours(repo, index, new, held(repo, old, new)))

    sizes = {}
    for block in git(repo, "ls-files", "--debug").split("\n"):
        if block and not block.startswith(" "):
            path = block
        elif "size:" in block:
            sizes[path] = int(block.split("size:")[1].split()[0])
    assert sizes["a.txt"] == 0 and sizes["x.c"] == len("x.c\n")


@pytest.mark.parametrize(
    "setup",
    [
        ["update-index", "--index-version", "4"],
        ["update-index", "--skip-worktree", "a.txt"],
        ["update-index", "--split-index"],
    ],
    ids=["version-4", "skip-worktree", "split-index"],
)
def test_an_index_git_reads_otherwise_is_left_to_git(repo: Path, setup: list[str]) -> None:
    old = git(repo, "rev-parse", "HEAD").strip()
    write(repo, "src/b.py", "changed\n")
    new = commit(repo, "b")
    git(repo, "read-tree", "--reset", old)
    git(repo, *setup)
    got = index_reset.read(repo / ".git" / "index")
    assert got is not None
    assert index_reset.reset(got, new, held(repo, old, new)) is None


def test_a_tree_neither_held_nor_in_the_cache_tree_is_left_to_git(repo: Path) -> None:
    old = git(repo, "rev-parse", "HEAD").strip()
    write(repo, "src/deep/c.py", "changed\n")
    new = commit(repo, "c")
    git(repo, "read-tree", "--reset", old)
    objects = held(repo, old, new)
    deep = git(repo, "rev-parse", f"{new}:src/deep").strip()
    got = index_reset.read(repo / ".git" / "index")
    assert got is not None
    assert index_reset.reset(got, new, {k: v for k, v in objects.items() if k != deep}) is None
    assert index_reset.reset(got, new, objects) is not None
    width = len(old)
    git(
        repo, "update-index", "--add", "--cacheinfo", f"100644,{'0' * (width - 1)}1,src/deep/zz"
    )  # src/deep invalid
    got = index_reset.read(repo / ".git" / "index")
    assert got is not None
    objects.pop(git(repo, "rev-parse", f"{new}:src").strip())
    assert index_reset.reset(got, new, objects) is None


def test_a_lock_another_git_holds_is_not_taken_and_a_put_back_keeps_the_old_time(repo: Path) -> None:
    index = repo / ".git" / "index"
    (repo / ".git" / "index.lock").write_bytes(b"")
    with pytest.raises(FileExistsError):
        index_reset.Lock(index)
    (repo / ".git" / "index.lock").unlink()
    before = index_reset.read(index)
    assert before is not None
    with index_reset.Lock(index) as lock:
        lock.install(b"not an index")
    with index_reset.Lock(index) as lock:
        lock.install(before.data, before.mtime_ns)
    after = index_reset.read(index)
    assert after == before and not (repo / ".git" / "index.lock").exists()
    with index_reset.Lock(index):
        pass  # nothing installed: the lock is removed, the index as it was
    assert index_reset.read(index) == before and not (repo / ".git" / "index.lock").exists()
