"""flowd reading, as data, a git file a lane (or a merge-train candidate's gates) replaced with a
FIFO: the worktree's `.git`, an admin dir's `gitdir`, a lane repository's `HEAD`. Each is opened
without blocking and not read (it is no regular file); before, the open waited for a writer, and
the take-in, the candidate check or the admin look with it, forever. Real files and FIFOs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from flowd.vcs import gitcli, quarantine


def _returns(call: Callable[[], object], fifos: list[Path]) -> tuple[bool, object]:
    """(whether `call` came back within 10 s, what it gave); a stuck call is let go first (a
    writer opens each FIFO) so the test fails instead of hanging."""
    got: list[object] = []
    look = threading.Thread(target=lambda: got.append(call()), daemon=True)
    look.start()
    look.join(10)
    stuck = look.is_alive()
    while look.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        look.join(0.1)
    return not stuck, got[0] if got else None


def test_a_fifo_in_a_git_files_place_is_never_waited_on(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    os.mkfifo(wt / ".git")
    worktree_admin = tmp_path / "common" / "worktrees" / "wt"
    worktree_admin.mkdir(parents=True)
    os.mkfifo(worktree_admin / "gitdir")
    head = tmp_path / "HEAD"
    os.mkfifo(head)
    fifos = [wt / ".git", worktree_admin / "gitdir", head]

    assert _returns(lambda: gitcli.named_by_dotgit(str(wt)), fifos) == (True, None)
    assert _returns(lambda: gitcli.private_git_dir(wt), fifos) == (True, None)
    assert _returns(lambda: gitcli.admin_of(tmp_path / "common", wt), fifos) == (True, None)
    assert _returns(lambda: gitcli.small_file(head), fifos) == (True, None)


def test_a_submodules_head_is_read_as_data(tmp_path: Path) -> None:
    """The take-in routes a submodule's objects by the HEAD of its git dir in the admin dir,
    which the lane's git writes: a FIFO there, or a branch named out of its `refs/`, gives no
    commit (and no wait)."""
    module = tmp_path / "modules" / "sub"
    module.mkdir(parents=True)
    os.mkfifo(module / "HEAD")
    assert _returns(lambda: quarantine._head_of(module), [module / "HEAD"]) == (True, None)
    (module / "HEAD").unlink()
    (tmp_path / "outside").write_text("a" * 40 + "\n")
    (module / "HEAD").write_text("ref: refs/../../../outside\n")
    assert quarantine._head_of(module) is None
    (module / "refs" / "heads").mkdir(parents=True)
    (module / "refs" / "heads" / "main").write_text("b" * 40 + "\n")
    (module / "HEAD").write_text("ref: refs/heads/main\n")
    assert quarantine._head_of(module) == "b" * 40
