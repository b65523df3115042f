"""The folders a story's sparse worktree checks out (docs/repositories.md "Sparse worktrees"): what
its perimeter names (owned, shared read-only and read-first entries) and the project's `sparseDirs`, as git's
cone mode takes them (whole folders, and always the files at the root). Pure: what exists at the
story's start commit comes in as `kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flowd.base import paths
from flowd.plan.model import Story


def cone_entries(story: Story, also: Sequence[str]) -> list[str]:
    """The perimeter entries (as prefixes) the cone is made of, for one `git ls-tree` of them."""
    named = (*story.owned, *story.shared_read_only, *story.read_first, *also)
    return sorted({paths.as_prefix(e) for e in named})


def sparse_cone(story: Story, also: Sequence[str], kinds: Mapping[str, bool]) -> list[str] | None:
    """The folders to check out, outermost only and sorted; None when the perimeter needs the
    whole tree (an entry that is the root itself).

    `kinds` maps each entry that exists at the start commit to whether it is a folder. A file
    brings its folder (cone mode checks out folders); an entry that does not exist yet (a file or
    folder the story will create) is read by its shape: `a/b.py` brings `a`, `a/b` brings `a/b`.
    """
    folders: set[str] = set()
    for entry in cone_entries(story, also):
        if entry in ("", "."):
            return None
        folder = kinds.get(entry)
        if folder is None:
            folder = not paths.looks_like_file(entry)
        parent = entry if folder else entry.rpartition("/")[0]
        if parent:
            folders.add(parent)
    return [f for f in sorted(folders) if not any(paths.within(f, o) for o in folders if o != f)]
