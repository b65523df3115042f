"""Big objects in a lane's quarantine (flowd/vcs/loose_objects.py, docs/sandbox.md "Big objects"):
a blob past the held sizes goes from its file to the pack and comes in whole; an object file
that inflates past its header, ends short, carries data after its stream or does not hash to
its name is refused with nothing written; a commit, tree or tag past `HELD_OTHER` is refused.
Real repositories and real git; the sizes are lowered so the files stay small."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest

from flowd.vcs import loose_objects
from flowd.vcs.incoming import Refused
from flowd.vcs.loose_objects import Held, blob_at, read
from flowd.vcs.quarantine import quarantine, take_in

ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, data: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, input=data, capture_output=True, env={**os.environ, **ID, **(env or {})}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


@pytest.fixture
def lane(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(repository, worktree, its quarantine) with the worktree's git writing into the quarantine."""
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "a.txt").write_text("a\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "story/ep/a", str(wt))
    q = quarantine(repo / ".git" / "worktrees" / "wt")
    q.mkdir()
    return repo, wt, q


def _in_quarantine(repo: Path, q: Path) -> dict[str, str]:
    return {
        "GIT_OBJECT_DIRECTORY": str(q),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo / ".git" / "objects"),
    }


def _store(repo: Path) -> list[str]:
    objects = repo / ".git" / "objects"
    return sorted(str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file())


def _plant(q: Path, name: str, raw: bytes) -> Path:
    (q / name[:2]).mkdir(exist_ok=True)
    path = q / name[:2] / name[2:]
    path.write_bytes(raw)
    return path


def test_blobs_past_the_held_sizes_come_in_whole_from_their_files(
    lane: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, wt, q = lane
    monkeypatch.setattr(loose_objects, "HELD_BLOB", 4096)
    monkeypatch.setattr(loose_objects, "HELD_TOTAL", 8192)
    big = os.urandom(300_000)
    (wt / "big.bin").write_bytes(big)
    for i in range(8):  # small ones, past the total held after the first few
        (wt / f"s{i}.txt").write_bytes(os.urandom(3000))
    env = _in_quarantine(repo, q)
    git(wt, "add", "-A", env=env)
    git(wt, "commit", "-q", "-m", "big", env=env)
    head = git(wt, "rev-parse", "HEAD", env=env)
    name = git(wt, "rev-parse", "HEAD:big.bin", env=env)
    fd = os.open(q / name[:2], os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read(fd, name[2:], name, q, Held()) == (b"blob", None)  # not held
    finally:
        os.close(fd)

    taken = take_in(repo / ".git", repo / ".git" / "worktrees" / "wt")

    assert name in taken.names and head in taken.held
    blob = subprocess.run(["git", "cat-file", "blob", name], cwd=repo, capture_output=True, check=True).stdout
    assert blob == big
    assert git(repo, "cat-file", "-t", head) == "commit"
    git(repo, "fsck", "--full", "--no-dangling")
    assert not [p for p in (repo / ".git" / "objects").iterdir() if p.name.startswith("tmp")]


@pytest.mark.parametrize(
    "what",
    ["inflates past its header", "ends short", "data after its stream", "misnamed", "bomb declared big"],
)
def test_an_object_file_that_lies_is_refused_and_nothing_comes_in(
    lane: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    repo, _, q = lane
    monkeypatch.setattr(loose_objects, "HELD_BLOB", 4096)
    zeros = b"\0" * (20 << 20)  # 20 MiB of zeros: about 20 KiB compressed
    good = b"blob 5\0hello"
    name = hashlib.sha1(good).hexdigest()
    raw = {
        "inflates past its header": zlib.compress(b"blob 5\0" + zeros),
        "ends short": zlib.compress(good)[:-6],
        "data after its stream": zlib.compress(good) + b"more",
        "misnamed": zlib.compress(b"blob 5\0world"),
        # Declared big, so streamed into the pack: refused there, the spooled pack gone with it.
        "bomb declared big": zlib.compress(f"blob {len(zeros)}\0".encode() + zeros),
    }[what]
    _plant(q, name, raw)
    before = _store(repo)

    with pytest.raises(Refused):
        take_in(repo / ".git", repo / ".git" / "worktrees" / "wt")

    assert _store(repo) == before
    git(repo, "fsck", "--full", "--no-dangling")


def test_a_commit_tree_or_tag_past_its_size_is_refused(
    lane: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, wt, q = lane
    monkeypatch.setattr(loose_objects, "HELD_OTHER", 1000)
    for i in range(60):  # a tree of 60 entries: about 2 KiB
        (wt / f"file-with-a-long-name-{i:03}.txt").write_text(f"{i}\n", encoding="utf-8")
    env = _in_quarantine(repo, q)
    git(wt, "add", "-A", env=env)
    git(wt, "commit", "-q", "-m", "wide", env=env)
    before = _store(repo)

    with pytest.raises(Refused, match=r"a tree of \d+ bytes, more than flowd takes in"):
        take_in(repo / ".git", repo / ".git" / "worktrees" / "wt")

    assert _store(repo) == before


def test_a_blob_read_again_must_still_be_a_blob(lane: tuple[Path, Path, Path]) -> None:
    """Between the scan and the pack a lane may rewrite a file: what is packed is checked again."""
    repo, _, q = lane
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    raw = (repo / ".git" / "objects" / tree[:2] / tree[2:]).read_bytes()
    _plant(q, tree, raw)
    fd = os.open(q / tree[:2], os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(Refused, match="changed while flowd read it"), blob_at(fd, tree[2:], tree, q):
            pass
    finally:
        os.close(fd)


def test_a_folder_named_as_an_object_is_refused_not_raised(lane: tuple[Path, Path, Path]) -> None:
    """A lane makes a folder where an object's file goes: a refusal in one sentence (os.fdopen
    of a folder raises IsADirectoryError, which no caller of the take-in expects)."""
    repo, _, q = lane
    name = "5" * 40
    (q / name[:2] / name[2:]).mkdir(parents=True)
    before = _store(repo)

    with pytest.raises(Refused, match="is not a file"):
        take_in(repo / ".git", repo / ".git" / "worktrees" / "wt")

    assert _store(repo) == before
