"""Your repository's refs read as data, each part again only when it changed: packed-refs once
per version of the file (flowd/vcs/packed_refs.py), loose ref files by their identity
(flowd/vcs/loose_refs.py). On real repositories: what git itself reads; a lane repository's copy
spliced from them is the file a plain sort would write; a file written in place (no git does; a
lane where it may) seen even with its modification time set back; a folder of loose refs taken
as it was only while git moved nothing in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flowd.vcs import loose_refs, packed_refs


def _git(repo: Path, *args: str, data: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with 300 packed tags and an annotated one."""
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
    monkeypatch.setattr(loose_refs, "RACY_NS", 0)
    packed = packed_refs.read(repo / ".git")
    assert packed_refs.read(repo / ".git") is packed


def test_packed_refs_written_in_place_are_read_anew(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loose_refs, "RACY_NS", 0)
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


# -- loose refs ----------------------------------------------------------------------------------
@pytest.fixture
def loose(tmp_path: Path) -> Path:
    """A repository with 500 loose remote branches."""
    repo = tmp_path / "r"
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    for n in range(2):
        _git(
            repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", f"c{n}"
        )
    head = _git(repo, "rev-parse", "HEAD").strip()
    made = "".join(f"create refs/remotes/origin/b{i} {head}\n" for i in range(500))
    _git(repo, "update-ref", "--stdin", data=made)
    return repo


@pytest.fixture
def trusting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files trusted as soon as they are older than the read (the test cannot wait a second)."""
    monkeypatch.setattr(loose_refs, "RACY_NS", 0)


def test_the_loose_refs_are_what_git_reads(loose: Path) -> None:
    common = loose / ".git"
    _git(loose, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    (common / "refs" / "heads" / "main.lock").write_text("0" * 40 + "\n")  # git's lock: no ref
    (common / "refs" / "heads" / ".hidden").write_text("0" * 40 + "\n")  # git reads no dot name
    os.symlink("/etc/hostname", common / "refs" / "heads" / "planted")  # named, never followed
    listed = _git(
        loose, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes", "refs/heads/main"
    )
    expected = dict(line.split(" ") for line in listed.splitlines())
    for exact in (True, False):
        read = loose_refs.read(common, exact=exact)
        assert {n: t for n, t in read.items() if n in expected} == expected
        assert read["refs/heads/alias"] == "ref: refs/heads/main"
        assert read["refs/heads/planted"] == "-> /etc/hostname"
        assert not {"refs/heads/main.lock", "refs/heads/.hidden"} & set(read)


def test_a_ref_written_in_place_is_seen_by_the_exact_read(loose: Path, trusting: None) -> None:
    common = loose / ".git"
    ref = common / "refs" / "remotes" / "origin" / "b7"
    old = ref.read_text().strip()
    assert loose_refs.read(common)["refs/remotes/origin/b7"] == old  # read, now trusted
    other = _git(loose, "rev-parse", "HEAD~1").strip()
    times = os.stat(ref)
    with open(ref, "r+") as handle:  # the same size, in place: no rename, its folder unchanged
        handle.write(other + "\n")
    os.utime(ref, ns=(times.st_atime_ns, times.st_mtime_ns))  # its modification time set back
    assert loose_refs.read(common)["refs/remotes/origin/b7"] == other  # its change time moved


def test_a_folder_is_taken_as_it_was_only_while_git_moved_nothing_in_it(loose: Path, trusting: None) -> None:
    common = loose / ".git"
    first = loose_refs.read(common, exact=False)
    assert loose_refs.read(common, exact=False) == first
    other = _git(loose, "rev-parse", "HEAD~1").strip()
    ref = common / "refs" / "remotes" / "origin" / "b7"
    with open(ref, "r+") as handle:  # no git writes a ref so: not seen while the folder stays
        handle.write(other + "\n")
    assert loose_refs.read(common, exact=False)["refs/remotes/origin/b7"] == first["refs/remotes/origin/b7"]
    _git(loose, "update-ref", "refs/remotes/origin/b9", other)  # git's own move renames into it
    again = loose_refs.read(common, exact=False)
    assert again["refs/remotes/origin/b9"] == other and again["refs/remotes/origin/b7"] == other
    _git(loose, "update-ref", "-d", "refs/remotes/origin/b3")
    _git(loose, "update-ref", "refs/heads/new", other)  # a new ref in another folder
    last = loose_refs.read(common, exact=False)
    assert "refs/remotes/origin/b3" not in last and last["refs/heads/new"] == other
