"""Your repository's packed-refs, parsed once per version of the file (flowd/vcs/packed_refs.py):
what git itself reads back, on real repositories; a lane repository's copy spliced from it is the
file a plain sort would write."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flowd.vcs import packed_refs


def _git(repo: Path, *args: str, data: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "r"
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "i")
    head = _git(repo, "rev-parse", "HEAD").strip()
    made = "".join(f"create refs/tags/v{i} {head}\n" for i in range(300))
    _git(repo, "update-ref", "--stdin", data=made)
    _git(repo, "tag", "-a", "-m", "annotated", "release")  # a peeled line in packed-refs
    _git(repo, "pack-refs", "--all")
    return repo


def _gits_refs(repo: Path) -> dict[str, str]:
    listed = _git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in listed.splitlines())


def test_the_packed_refs_are_what_git_reads(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packed = packed_refs.read(repo / ".git")
    assert dict(packed.shas) == _gits_refs(repo)
    assert packed.names == sorted(packed.names) and len(packed.lines) == len(packed.names)
    # Written less than a second before it was read: parsed again (a write in the same tick
    # would have left its times as they were, flowd/vcs/loose_refs.py).
    assert packed_refs.read(repo / ".git") is not packed
    # Older than its read (the test cannot wait a second): the same object, not parsed anew.
    monkeypatch.setattr(packed_refs, "RACY_NS", 0)
    packed = packed_refs.read(repo / ".git")
    assert packed_refs.read(repo / ".git") is packed


def test_packed_refs_written_in_place_are_read_anew(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packed_refs, "RACY_NS", 0)
    path = repo / ".git" / "packed-refs"
    packed = packed_refs.read(repo / ".git")
    other = _git(repo, "commit-tree", "-m", "x", "HEAD^{tree}").strip()
    times = os.stat(path)
    text = path.read_text().replace(f"{packed.shas['refs/tags/v3']} refs/tags/v3", f"{other} refs/tags/v3")
    with open(path, "r+") as handle:  # the same size, in place, its modification time set back
        handle.write(text)
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert packed_refs.read(repo / ".git").shas["refs/tags/v3"] == other


def test_a_new_version_of_the_file_is_read_anew(repo: Path) -> None:
    first = packed_refs.read(repo / ".git")
    _git(repo, "tag", "-d", "v7")  # git rewrites packed-refs without it
    again = packed_refs.read(repo / ".git")
    assert again is not first and "refs/tags/v7" not in again.shas
    assert dict(again.shas) == _gits_refs(repo)


def test_a_lane_repositorys_view_is_the_sorted_file_git_reads(repo: Path, tmp_path: Path) -> None:
    packed = packed_refs.read(repo / ".git")
    other = _git(repo, "commit-tree", "-m", "x", "HEAD^{tree}").strip()
    loose = {
        "refs/tags/v12": other,  # over a packed one
        "refs/heads/story/ep/a": other,  # new, in the middle
        "refs/zz/last": other,  # new, after every packed one
        "refs/aa/first": other,  # new, before every packed one
        "refs/tags/v3": packed.shas["refs/tags/v3"],  # loose, the same value
    }
    view = packed_refs.view(packed, loose, "refs/tags/v5")
    expected = {**packed.shas, **loose}
    del expected["refs/tags/v5"]
    plain = "".join(f"{sha} {name}\n" for name, sha in sorted(expected.items()))
    assert view.decode() == packed_refs.HEADER + plain
    # git reads it back as these refs, sorted as its header says.
    copy = tmp_path / "copy"
    _git(tmp_path, "init", "-q", "--bare", str(copy))
    (copy / "objects" / "info" / "alternates").write_text(str(repo / ".git" / "objects") + "\n")
    (copy / "packed-refs").write_bytes(view)
    assert _gits_refs(copy) == expected
    assert _git(copy, "rev-parse", "refs/tags/v12").strip() == other


def test_a_link_or_no_file_is_no_refs(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    os.replace(repo / ".git" / "packed-refs", elsewhere)
    assert packed_refs.read(repo / ".git") is packed_refs.EMPTY
    os.symlink(elsewhere, repo / ".git" / "packed-refs")
    assert packed_refs.read(repo / ".git") is packed_refs.EMPTY


def test_an_unsorted_file_is_sorted(tmp_path: Path) -> None:
    common = tmp_path / "g"
    common.mkdir()
    sha = "a" * 40
    (common / "packed-refs").write_text(f"{sha} refs/tags/b\n{sha} refs/tags/a\n^{'b' * 40}\n")
    packed = packed_refs.read(common)
    assert packed.names == ["refs/tags/a", "refs/tags/b"]
    assert packed_refs.view(packed, {}, None).decode().splitlines()[1:] == [
        f"{sha} refs/tags/a",
        f"{sha} refs/tags/b",
    ]
