"""The inotify watch budget: whether a tree can be watched live or must be polled (docs/performance.md).

Linux caps inotify watches per user (`fs.inotify.max_user_watches`, and per user namespace
`user.max_inotify_watches`); watchfiles' notify backend takes one watch per directory of a
recursive tree. A tree that would not fit is polled instead of half-watched: notify 8.0 drops the
kernel's ENOSPC for directories created after the watch started, so the only reliable moments are
before the watch (this estimate) and its start (the error it raises).

`FLOWD_INOTIFY_WATCHES`, read at each estimate, replaces the kernel's limit by a smaller or larger
one: for tests, and for operators who keep watches for other tools (an editor watches too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LIMIT_FILES = (Path("/proc/sys/fs/inotify/max_user_watches"), Path("/proc/sys/user/max_inotify_watches"))
BUDGET_ENV = "FLOWD_INOTIFY_WATCHES"
# Lanes create directories while watched, and the user's other tools need watches too: a tree fits
# only if this much is left over once it is watched.
SPARE_MIN = 100
SPARE_SHARE = 10  # plus a tenth of the tree's own directories
LIMIT_MESSAGE = "OS file watch limit reached"  # notify's MaxFilesWatch, as watchfiles raises it
# A poll stats every entry of the tree each round: about 4% of a core for 25,000 entries a second
# here (docs/performance.md). A round every `entries / POLL_ENTRIES_PER_MS` ms keeps a polled
# lane under about 1% of a core, between 1 s (a small tree's flags stay prompt) and 10 s.
POLL_ENTRIES_PER_MS = 5
POLL_MIN_MS = 1_000
POLL_MAX_MS = 10_000


@dataclass(frozen=True)
class Budget:
    needed: int  # directories in the tree: one watch each
    entries: int  # files, links and directories: what a poll looks at
    limit: int  # the user's limit (or the configured one)
    used: int  # watches the user's processes hold now

    @property
    def free(self) -> int:
        return self.limit - self.used

    @property
    def poll_ms(self) -> int:
        return min(POLL_MAX_MS, max(POLL_MIN_MS, self.entries // POLL_ENTRIES_PER_MS))

    @property
    def fits(self) -> bool:
        return self.needed + max(SPARE_MIN, self.needed // SPARE_SHARE) <= self.free


def limit() -> int:
    """The smallest limit that applies to this process (or `FLOWD_INOTIFY_WATCHES` when set)."""
    configured = os.environ.get(BUDGET_ENV, "").strip()
    if configured.isdigit():
        return int(configured)
    found = []
    for path in LIMIT_FILES:
        try:
            found.append(int(path.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return min(found) if found else 2**31 - 1


def watches_of(pid: int | str) -> int:
    """Watches held by one process: its inotify descriptors' `inotify wd:` lines in fdinfo."""
    total = 0
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(os.scandir(fd_dir))
    except OSError:
        return 0  # another user's process (not ours to count, nor counted against us), or gone
    for fd in fds:
        try:
            if os.readlink(fd.path) != "anon_inode:inotify":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd.name}", encoding="ascii", errors="replace") as info:
                total += sum(1 for line in info if line.startswith("inotify wd:"))
        except OSError:
            continue
    return total


def watches_in_use() -> int:
    """Watches held by every process this user can see (the limit is per user)."""
    uid = os.getuid()
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        total += watches_of(entry.name)
    return total


def directories(tree: Path) -> int:
    """The watches a recursive watch of `tree` takes: one per directory, the tree's own included."""
    return tree_size(tree)[0]


def tree_size(tree: Path) -> tuple[int, int]:
    """(directories, entries) of `tree`, itself included; links are not followed."""
    dirs = entries = 0
    stack = [str(tree)]
    while stack:
        dirs += 1
        entries += 1
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        entries += 1
        except OSError:
            continue
    return dirs, entries


def budget(tree: Path) -> Budget:
    dirs, entries = tree_size(tree)
    return Budget(needed=dirs, entries=entries, limit=limit(), used=watches_in_use())


def is_limit_error(error: BaseException) -> bool:
    """The watcher ran out of watches (ENOSPC from inotify_add_watch, as notify reports it)."""
    return isinstance(error, OSError) and (error.errno == 28 or LIMIT_MESSAGE in str(error))
