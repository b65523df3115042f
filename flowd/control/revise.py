"""The client side of review comments (docs/answers.md: revisions): `flowd revise` and the language
server's `flow.addRevision` turn a file and a line into a `Revision` request for a live run.

A comment names a path relative to the repository. An absolute path (or an editor's file URI) is
mapped through git's worktree list: a file in a story's worktree is that story's path, a file in
the user's checkout or the epic worktree is the same path in the story's change. A file in
another story's worktree, or outside every worktree of the repository, is refused.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from flowd.base.errors import EXIT_BAD_INPUT, EXIT_OK, FlowdError, InputError
from flowd.control.answer import post_here_or_by_daemon
from flowd.store.inbox import By, Revision
from flowd.vcs.gitops import Repo

_LOCATION = re.compile(r"^(?P<path>.+):(?P<line>[0-9]+)$")
_STORY_BRANCH = re.compile(r"^story/[^/]+/(?P<story>[^/]+)$")


@dataclass(frozen=True)
class Located:
    path: str  # relative to the repository, `/`-separated
    story: str | None  # the story whose worktree holds the file, when it is one


def parse_location(text: str) -> tuple[str, int]:
    """`PATH:LINE` → (path, line); InputError naming the argument otherwise."""
    found = _LOCATION.match(text.strip())
    if found is None or int(found["line"]) < 1:
        raise InputError(
            f"PATH:LINE {text!r} is not a path and a line number from 1 (for example src/app.py:12)"
        )
    return found["path"], int(found["line"])


def main_checkout(where: Path) -> Repo:
    """The repository's main checkout (where `.flow/` lives), also from a linked worktree."""
    repo = Repo.discover(where)
    if repo.git_dir == repo.common_dir:
        return repo
    with_main = repo.worktrees()
    if with_main and (with_main[0].path / ".git").is_dir():
        return Repo.discover(with_main[0].path)
    return repo


def locate(repo: Repo, given: str) -> Located:
    """The repository path `given` names (repository-relative, or absolute in one of its worktrees)."""
    raw = Path(given)
    if not raw.is_absolute():
        return Located(given.replace("\\", "/"), None)
    target = raw.resolve()
    for tree in sorted(repo.worktrees(), key=lambda t: len(t.path.parts), reverse=True):
        root = tree.path.resolve()
        if target == root or root not in target.parents:
            continue
        relative = target.relative_to(root).as_posix()
        branch = _STORY_BRANCH.match(tree.branch or "")
        return Located(relative, branch["story"] if branch else None)
    raise InputError(f"{given} is not inside {repo.root} or one of its worktrees")


def revision_request(repo: Repo, story: str, given: str, line: int, text: str, by: By) -> Revision:
    """The request for a comment on `given`:`line`; InputError for a file of another story."""
    if not text.strip():
        raise InputError("the revision TEXT is empty; say what the coder should change")
    located = locate(repo, given)
    if located.story is not None and located.story != story:
        raise InputError(
            f"{given} is in story {located.story}'s worktree, not story {story}'s; "
            f"name story {located.story}, or the same path in story {story}'s worktree"
        )
    return Revision(story=story, path=located.path, line=line, text=text.strip(), by=by)


def revise_command(args: argparse.Namespace) -> int:
    path, line = parse_location(args.location)
    repo = main_checkout(Path.cwd())
    request = revision_request(repo, args.story, path, line, " ".join(args.text), "cli")
    reply = post_here_or_by_daemon(repo, args.run_id, request)
    if not reply.ok:
        raise FlowdError(reply.message, exit_code=EXIT_BAD_INPUT)
    print(reply.message)
    return EXIT_OK
