"""The inotify budget on a real tree and real watches: a recursive watch takes one watch per
directory, the server counts them where the kernel does, and a configured budget replaces the limit."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from watchfiles._rust_notify import RustNotify

from flowd.server import inotify


def _tree(root: Path, dirs: int) -> Path:
    for i in range(dirs):
        (root / f"d{i % 5}" / f"e{i}").mkdir(parents=True)
        (root / f"d{i % 5}" / f"e{i}" / "f.txt").write_text("x")
    return root


def test_a_recursive_watch_takes_one_watch_per_directory(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree", 20)
    needed = inotify.directories(tree)
    assert needed == 1 + 5 + 20  # the tree, d0..d4, e0..e19
    before = inotify.watches_of(os.getpid())
    watcher = RustNotify([str(tree)], False, False, 50, True, False)
    try:
        assert inotify.watches_of(os.getpid()) - before == needed
        assert inotify.watches_in_use() >= needed
    finally:
        watcher.close()
    # The watcher's thread lets its descriptor go after close returns: wait for it.
    deadline = time.monotonic() + 30
    while inotify.watches_of(os.getpid()) != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inotify.watches_of(os.getpid()) == before


def test_a_configured_budget_replaces_the_kernel_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _tree(tmp_path / "tree", 3)
    monkeypatch.setenv(inotify.BUDGET_ENV, "50")
    found = inotify.budget(tree)
    assert found.limit == 50 and not found.fits
    # `used` counts every watch the user's processes hold, other tests' servers' too, which come
    # and go between two reads: room for them, or this fits by chance only.
    roomy = found.used + found.needed + inotify.SPARE_MIN + 1000
    monkeypatch.setenv(inotify.BUDGET_ENV, str(roomy))
    again = inotify.budget(tree)
    assert again.limit == roomy and again.fits
    monkeypatch.delenv(inotify.BUDGET_ENV)
    assert inotify.limit() == min(int(p.read_text()) for p in inotify.LIMIT_FILES if p.exists())


def test_the_watch_limit_error_is_recognised() -> None:
    # As watchfiles raises notify's MaxFilesWatch (no errno), and as a raw ENOSPC.
    assert inotify.is_limit_error(OSError('OS file watch limit reached. about ["/x"] (Error { ... })'))
    assert inotify.is_limit_error(OSError(28, "No space left on device"))
    assert not inotify.is_limit_error(OSError(13, "Permission denied"))
    assert not inotify.is_limit_error(RuntimeError("OS file watch limit reached"))


def test_a_polled_tree_is_polled_less_often_the_bigger_it_is(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree", 20)
    assert inotify.tree_size(tree) == (26, 46)  # 26 directories and 20 files
    small = inotify.Budget(needed=26, entries=46, limit=10, used=0)
    assert small.poll_ms == inotify.POLL_MIN_MS
    monorepo = inotify.Budget(needed=251, entries=25_251, limit=10, used=0)
    assert inotify.POLL_MIN_MS < monorepo.poll_ms < inotify.POLL_MAX_MS
    huge = inotify.Budget(needed=9_000, entries=2_000_000, limit=10, used=0)
    assert huge.poll_ms == inotify.POLL_MAX_MS
