"""flowd reading and removing, unconfined, in a place a lane writes (flowd/base/fsio.py
`open_inside`, `unlink_inside`, `read_regular`): real files and links in a temp dir; a link in
the file's place or in a folder's before it leads nowhere."""

from __future__ import annotations

import os
from pathlib import Path

from flowd.base.fsio import open_inside, read_regular, unlink_inside


def _read(path: Path, root: Path) -> bytes | None:
    with open_inside(path, os.path.realpath(root)) as handle:
        return None if handle is None else handle.read()


def _places(tmp_path: Path) -> tuple[Path, Path]:
    """(a lane's folder, a folder of yours): `src/a.py` the lane's, `secret.txt` yours, and the
    lane's `out` a link to your folder (in a folder's place)."""
    lane, outside = tmp_path / "lane", tmp_path / "outside"
    (lane / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n", encoding="utf-8")
    (lane / "src" / "a.py").write_text("x = 1\n", encoding="utf-8")
    (lane / "out").symlink_to(outside)
    return lane, outside


def test_only_a_regular_file_whose_real_path_is_inside_is_opened(tmp_path: Path) -> None:
    lane, outside = _places(tmp_path)
    (lane / "src" / "to-secret").symlink_to(outside / "secret.txt")
    (lane / "src" / "to-a").symlink_to(lane / "src" / "a.py")
    os.mkfifo(lane / "src" / "pipe")

    assert _read(lane / "src" / "a.py", lane) == b"x = 1\n"
    assert _read(lane / "src" / "to-secret", lane) is None  # a link in the file's place
    assert _read(lane / "src" / "to-a", lane) is None  # even to a file inside: resolve it first
    assert _read(lane / "out" / "secret.txt", lane) is None  # a link in a folder's place
    assert _read(lane / "src" / "pipe", lane) is None  # not a regular file (opened without blocking)
    assert _read(lane / "src" / "missing", lane) is None
    assert _read(outside / "secret.txt", lane) is None
    assert _read(lane / "src" / "a.py", lane / "src" / "a") is None  # a prefix of a name is not a folder


def test_a_removal_goes_through_no_folder_that_is_a_link(tmp_path: Path) -> None:
    lane, outside = _places(tmp_path)
    secret = outside / "secret.txt"
    (lane / "src" / "link").symlink_to(secret)

    assert not unlink_inside(lane, "out/secret.txt") and secret.exists()  # listed a folder, a link now
    assert unlink_inside(lane, "src/link") and secret.exists()  # the link itself goes
    assert unlink_inside(lane, "src/a.py") and not (lane / "src" / "a.py").exists()
    assert unlink_inside(lane, "src/gone") and unlink_inside(lane, "nowhere/gone")
    assert not unlink_inside(lane, "src") and (lane / "src").is_dir()  # a folder is left
    assert not unlink_inside(lane, "../outside/secret.txt") and not unlink_inside(lane, "")


def test_a_file_read_as_data_is_a_regular_one_read_where_it_is(tmp_path: Path) -> None:
    lane, outside = _places(tmp_path)
    (lane / "src" / "to-secret").symlink_to(outside / "secret.txt")
    os.mkfifo(lane / "src" / "pipe")

    assert read_regular(lane / "src" / "a.py", None) == b"x = 1\n"
    assert read_regular(lane / "src" / "a.py", 3) == b"x ="
    assert read_regular(lane / "src" / "to-secret", None) is None
    assert read_regular(lane / "src" / "pipe", None) is None  # returns: a FIFO is not waited on
    assert read_regular(lane / "src", None) is None
