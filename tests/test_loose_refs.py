"""Your loose refs, each read again only when it may have changed (flowd/vcs/loose_refs.py), on
real repositories: what git itself reads; a ref written in place (no git does; a lane where it
may) seen by the exact read even with its modification time set back; a folder taken as it was
only while git moved nothing in it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flowd.vcs import loose_refs


def _git(repo: Path, *args: str, data: str | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=repo, input=data, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
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


def test_the_loose_refs_are_what_git_reads(repo: Path) -> None:
    common = repo / ".git"
    _git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    (common / "refs" / "heads" / "main.lock").write_text("0" * 40 + "\n")  # git's lock: no ref
    (common / "refs" / "heads" / ".hidden").write_text("0" * 40 + "\n")  # git reads no dot name
    os.symlink("/etc/hostname", common / "refs" / "heads" / "planted")  # named, never followed
    listed = _git(
        repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/remotes", "refs/heads/main"
    )
    expected = dict(line.split(" ") for line in listed.splitlines())
    for exact in (True, False):
        read = loose_refs.read(common, exact=exact)
        assert {n: t for n, t in read.items() if n in expected} == expected
        assert read["refs/heads/alias"] == "ref: refs/heads/main"
        assert read["refs/heads/planted"] == "-> /etc/hostname"
        assert not {"refs/heads/main.lock", "refs/heads/.hidden"} & set(read)


def test_a_ref_written_in_place_is_seen_by_the_exact_read(repo: Path, trusting: None) -> None:
    common = repo / ".git"
    ref = common / "refs" / "remotes" / "origin" / "b7"
    old = ref.read_text().strip()
    assert loose_refs.read(common)["refs/remotes/origin/b7"] == old  # read, now trusted
    other = _git(repo, "rev-parse", "HEAD~1").strip()
    times = os.stat(ref)
    with open(ref, "r+") as handle:  # the same size, in place: no rename, its folder unchanged
        handle.write(other + "\n")
    os.utime(ref, ns=(times.st_atime_ns, times.st_mtime_ns))  # its modification time set back
    assert loose_refs.read(common)["refs/remotes/origin/b7"] == other  # its change time moved


def test_a_folder_is_taken_as_it_was_only_while_git_moved_nothing_in_it(repo: Path, trusting: None) -> None:
    common = repo / ".git"
    first = loose_refs.read(common, exact=False)
    assert loose_refs.read(common, exact=False) == first
    other = _git(repo, "rev-parse", "HEAD~1").strip()
    ref = common / "refs" / "remotes" / "origin" / "b7"
    with open(ref, "r+") as handle:  # no git writes a ref so: not seen while the folder stays
        handle.write(other + "\n")
    assert loose_refs.read(common, exact=False)["refs/remotes/origin/b7"] == first["refs/remotes/origin/b7"]
    _git(repo, "update-ref", "refs/remotes/origin/b9", other)  # git's own move renames into it
    again = loose_refs.read(common, exact=False)
    assert again["refs/remotes/origin/b9"] == other and again["refs/remotes/origin/b7"] == other
    _git(repo, "update-ref", "-d", "refs/remotes/origin/b3")
    _git(repo, "update-ref", "refs/heads/new", other)  # a new ref in another folder
    last = loose_refs.read(common, exact=False)
    assert "refs/remotes/origin/b3" not in last and last["refs/heads/new"] == other
