"""The checkout's size read from git's index without git (flowd/vcs/index_size.py), checked
against `git ls-files --debug` for each index version git writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flowd.vcs.index_size import checkout_disk_bytes, index_entries


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("version", [2, 3, 4])
def test_entries_and_sizes_as_git_records_them(tmp_path: Path, version: int) -> None:
    repo = tmp_path / "r"
    (repo / "deep" / "er").mkdir(parents=True)
    files = {"a.txt": 1, "deep/b.bin": 4096, "deep/er/c.txt": 4097, "deep/er/c2.txt": 0, "z" * 90: 10}
    for name, size in files.items():
        (repo / name).write_bytes(b"x" * size)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "update-index", "--index-version", str(version))
    if version == 3:  # an entry with the extended flags (intent to add) makes git write version 3
        (repo / "new.txt").write_bytes(b"y" * 5)
        _git(repo, "add", "-N", "new.txt")
        files["new.txt"] = 0  # an intent-to-add entry records no size
    debug = _git(repo, "ls-files", "--debug")
    sizes = [int(line.split("size: ")[1].split()[0]) for line in debug.splitlines() if "size: " in line]
    assert sorted(sizes) == sorted(files.values())
    git_dir = repo / ".git"
    assert index_entries(git_dir) == len(files)
    assert checkout_disk_bytes(git_dir, git_dir, block=4096) == sum(
        max(1, -(-s // 4096)) * 4096 for s in sizes
    )


def test_no_index_or_a_damaged_one_gives_none(tmp_path: Path) -> None:
    git_dir = tmp_path / ".git"
    git_dir.mkdir()
    assert index_entries(git_dir) is None and checkout_disk_bytes(git_dir, git_dir) is None
    (git_dir / "index").write_bytes(b"DIRC\0\0\0\x02\0\0\0\x05short")
    assert index_entries(git_dir) == 5
    assert checkout_disk_bytes(git_dir, git_dir) is None
    (git_dir / "index").write_bytes(b"NOPE" + b"\0" * 20)
    assert index_entries(git_dir) is None
