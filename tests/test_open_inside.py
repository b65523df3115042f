"""flowd reading and removing, unconfined, in a place a lane writes (flowd/base/fsio.py
`open_inside`, `unlink_inside`): real files and links in a temp dir; a link in the file's place
or in a folder's before it leads nowhere."""

from __future__ import annotations

import os
from pathlib import Path

from flowd.base.fsio import open_inside, unlink_inside


def _read(path: Path, root: Path) -> bytes | None:
    with open_inside(path, os.path.realpath(root)) as handle:
        return None if handle is None else handle.read()


def test_only_a_regular_file_whose_real_path_is_inside_is_opened(tmp_path: Path) -> None:
    lane, outside = tmp_path / "lane", tmp_path / "outside"
    (lane / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n", encoding="utf-8")
    (lane / "src" / "a.py").write_text("x = 1\n", encoding="utf-8")
    (lane / "src" / "to-secret").symlink_to(outside / "secret.txt")
    (lane / "src" / "to-a").symlink_to(lane / "src" / "a.py")
    (lane / "out").symlink_to(outside)  # a folder's place
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
    lane, outside = tmp_path / "lane", tmp_path / "outside"
    (lane / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "key").write_text("yours\n", encoding="utf-8")
    (lane / "src" / "key").write_text("the lane's\n", encoding="utf-8")
    (lane / "src" / "link").symlink_to(outside / "key")
    (lane / "sub").symlink_to(outside)  # listed as a folder, swapped for a link since

    assert not unlink_inside(lane, "sub/key") and (outside / "key").exists()
    assert unlink_inside(lane, "src/link") and (outside / "key").exists()  # the link itself goes
    assert unlink_inside(lane, "src/key") and not (lane / "src" / "key").exists()
    assert unlink_inside(lane, "src/gone") and unlink_inside(lane, "nowhere/gone")
    assert not unlink_inside(lane, "src") and (lane / "src").is_dir()  # a folder is left
    assert not unlink_inside(lane, "../outside/key") and not unlink_inside(lane, "")
