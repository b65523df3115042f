"""How bootstrap copies (docs/worktree-bootstrap.md, "How fast"): a reflink clone where the file
system can make one, else an in-kernel copy, with what `shutil.copy2` keeps; never a hard link.
Real repositories and files; where the test's file system clones, the clone path runs instead of
the fallback and both are checked against the same expectations."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from flowd.engine import bootstrap
from flowd.engine.bootstrap import _Copier, bootstrap_files, clone_support
from flowd.store.config import Settings
from flowd.vcs.gitops import Repo

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=GIT_ENV)


def _repo(tmp_path: Path) -> tuple[Repo, Path]:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("node_modules/\n.env\n")
    (root / ".worktreeinclude").write_text("node_modules/\n.env\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    mods = root / "node_modules" / "pkg" / "lib"
    mods.mkdir(parents=True)
    (mods / "index.js").write_bytes(b"x" * 70_000)
    (mods / "empty.js").write_bytes(b"")
    (mods / "run.sh").write_text("#!/bin/sh\n")
    (mods / "run.sh").chmod(0o751)
    os.utime(mods / "index.js", ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    (root / ".env").write_text("TOKEN=1\n")
    repo = Repo(root)
    return repo, repo.worktree_add(tmp_path / "wt", "story", "main")


ALL = [
    ".env",
    "node_modules/pkg/lib/empty.js",
    "node_modules/pkg/lib/index.js",
    "node_modules/pkg/lib/run.sh",
]


def _check_copies(repo: Repo, wt: Path, rels: list[str]) -> None:
    for rel in rels:
        src, dest = os.stat(repo.root / rel), os.stat(wt / rel)
        assert (wt / rel).read_bytes() == (repo.root / rel).read_bytes()
        assert dest.st_ino != src.st_ino and dest.st_nlink == 1  # never a hard link
        assert dest.st_mode == src.st_mode and dest.st_mtime_ns == src.st_mtime_ns  # as copy2
    # A lane writing its copy changes only its own (clone or copy alike).
    (wt / "node_modules/pkg/lib/index.js").write_bytes(b"changed by the lane")
    assert (repo.root / "node_modules/pkg/lib/index.js").read_bytes() == b"x" * 70_000
    assert not list(wt.rglob("*.flowd-copy"))


def test_the_copy_keeps_what_copy2_keeps_and_is_never_a_link(tmp_path: Path) -> None:
    repo, wt = _repo(tmp_path)
    copied = bootstrap_files(repo, Settings(), wt)
    assert copied.copied == ALL
    assert copied.skipped == []
    _check_copies(repo, wt, ALL)
    # Prepared again (a resume): the user's file wins over the lane's change.
    bootstrap_files(repo, Settings(), wt)
    assert (wt / "node_modules/pkg/lib/index.js").read_bytes() == b"x" * 70_000


def test_where_the_file_system_cannot_clone_the_first_answer_stands(tmp_path: Path) -> None:
    repo, wt = _repo(tmp_path)
    copier = _Copier(repo.root, wt)
    assert copier.copy_one("node_modules/pkg/lib/index.js") is None
    assert copier.clones is clone_support(repo.root, wt)  # what this file system says
    assert copier.copy_one(".env") is None
    _check_copies(repo, wt, ["node_modules/pkg/lib/index.js", ".env"])


def test_a_worktree_on_another_file_system_gets_plain_copies(tmp_path: Path) -> None:
    """The checkout on one file system, the worktree on another (`worktreeRoot` on a tmpfs):
    no clone, copy_file_range refuses across them (EXDEV) or copies; the copies are the same."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system to put the worktree on")
    repo, _ = _repo(tmp_path)
    with tempfile.TemporaryDirectory(dir=shm) as other:
        wt = repo.worktree_add(Path(other) / "wt", "elsewhere", "main")
        try:
            assert not clone_support(repo.root, wt)
            copier = _Copier(repo.root, wt)
            assert all(copier.copy_one(rel) is None for rel in ALL)
            assert copier.clones is False
            _check_copies(repo, wt, ALL)
        finally:
            repo.worktree_remove(wt, force=True)


@pytest.mark.parametrize("where", ["dest", "temp", "folder"])
def test_a_link_planted_in_the_worktree_is_never_written_through(tmp_path: Path, where: str) -> None:
    """A lane (a spare's last one, or a resumed story's) planted a link where flowd copies a
    `.worktreeinclude` file: at the file, at flowd's temp name beside it, or as its folder. The
    user's file it points at is never written (docs/sandbox.md "flowd's own git")."""
    repo, wt = _repo(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's\n")
    if where == "dest":
        (wt / ".env").symlink_to(victim)
    elif where == "temp":
        (wt / "..env.flowd-copy").symlink_to(victim)
    else:
        outside = tmp_path / "outside"
        outside.mkdir()
        (wt / "node_modules").symlink_to(outside)
    copied = bootstrap_files(repo, Settings(), wt)
    assert victim.read_text() == "the user's\n"
    if where == "folder":
        assert list((tmp_path / "outside").iterdir()) == []
        assert [rel for rel, _ in copied.skipped] == ALL[1:]
    else:
        assert not (wt / ".env").is_symlink() and (wt / ".env").read_text() == "TOKEN=1\n"
        assert not os.path.lexists(wt / "..env.flowd-copy")


def test_a_copy_is_rewritten_only_where_its_bytes_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepared again, a copy equal to the user's file is kept (compared a chunk at a time, the
    chunk lowered here); one that differs anywhere, the same size or not, is written anew."""
    monkeypatch.setattr(bootstrap, "_COMPARE_CHUNK", 4096)
    repo, wt = _repo(tmp_path)
    bootstrap_files(repo, Settings(), wt)
    index = wt / "node_modules/pkg/lib/index.js"
    kept = index.stat().st_ino
    bootstrap_files(repo, Settings(), wt)
    assert index.stat().st_ino == kept  # equal: left as it is
    changed = bytearray(b"x" * 70_000)
    changed[65_000] = ord("y")  # the same size, differing in a late chunk
    index.write_bytes(bytes(changed))
    bootstrap_files(repo, Settings(), wt)
    assert index.read_bytes() == b"x" * 70_000
