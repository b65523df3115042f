"""flowd's own pid-named folders and the sweep of what a killed flowd left (flowd/base/leftovers.py),
on the real file system and real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from flowd.base import leftovers

PREFIX = "flowd-test-"


def test_a_gone_processs_folders_are_swept_a_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f"{PREFIX}{dead.pid}-abcd1234"
    (gone / "index").parent.mkdir()
    (gone / "index").write_bytes(b"x")
    live = tmp_path / f"{PREFIX}{os.getppid()}-abcd1234"  # pytest's parent: running
    live.mkdir()
    old = tmp_path / f"{PREFIX}k2j4_x9q"  # an older flowd's name, no pid: swept once an hour old
    old.mkdir()
    hour_ago = time.time() - leftovers.STALE_S - 60
    os.utime(old, (hour_ago, hour_ago))
    young = tmp_path / f"{PREFIX}zz81_y7r"
    young.mkdir()
    other = tmp_path / f"flowd-other-{dead.pid}-abcd1234"  # another prefix: not this sweep's
    other.mkdir()

    made = leftovers.made(PREFIX, tmp_path)

    assert made.name.startswith(f"{PREFIX}{os.getpid()}-") and made.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, young, other, made))


def test_only_the_first_folder_of_a_process_sweeps(tmp_path: Path) -> None:
    leftovers.made(PREFIX, tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    later = tmp_path / f"{PREFIX}{dead.pid}-later000"
    later.mkdir()  # appears after this process swept: the next process's first folder sweeps it
    leftovers.made(PREFIX, tmp_path)
    assert later.is_dir()
    code = f"from flowd.base import leftovers; from pathlib import Path; leftovers.made({PREFIX!r}, Path({str(tmp_path)!r}))"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
    assert not later.exists()


def test_threads_making_their_first_folders_at_once_keep_every_one(tmp_path: Path) -> None:
    """The sweep takes a folder named for this pid for an earlier process's: no thread's folder
    may be made while another thread of the process sweeps."""
    made: list[Path] = []
    start = threading.Barrier(8)

    def make() -> None:
        start.wait()
        made.append(leftovers.made(PREFIX, tmp_path))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 8 and all(p.is_dir() for p in made)


def test_a_folder_for_a_body_is_removed_after_it(tmp_path: Path) -> None:
    with leftovers.folder(PREFIX) as path:
        (path / "index").write_bytes(b"x")
        assert path.name.startswith(f"{PREFIX}{os.getpid()}-") and path.parent == Path(tempfile.gettempdir())
    assert not path.exists()
