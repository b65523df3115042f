"""The files worktree bootstrap copied into a worktree (docs/worktree-bootstrap.md): the user's
(`.env`, keys), listed in the worktree's private git dir, out of the agents' reach, so that no
flowd commit, diff or perimeter listing takes them even after a story's `.gitignore` stops
ignoring them; and staging, which leaves them and `.flow/` out."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from flowd.vcs.gitcli import FLOW_DIR, private_git_dir, run_git, split_z

_BOOTSTRAPPED = "flowd-bootstrapped"


def mark_bootstrapped(wt: Path, paths: Sequence[str]) -> None:
    """Remember `paths` (repository-relative) as copied into `wt` by worktree bootstrap."""
    write_bootstrapped(wt, bootstrapped(wt) | set(paths))


def write_bootstrapped(wt: Path, listed: Iterable[str]) -> None:
    private = private_git_dir(wt)
    if private is None:
        return
    target = private / _BOOTSTRAPPED
    tmp = target.with_name(f".{_BOOTSTRAPPED}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # the admin dir is the lane's to write: a link there is not followed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write("".join(f"{p}\0" for p in sorted(listed)))
    os.replace(tmp, target)


def bootstrapped(wt: Path) -> frozenset[str]:
    """The paths worktree bootstrap copied into `wt` (empty when it copied none)."""
    private = private_git_dir(wt)
    if private is None:
        return frozenset()
    try:
        text = (private / _BOOTSTRAPPED).read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return frozenset()
    return frozenset(split_z(text))


def stage_all(wt: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Stage every change in `wt` except `.flow/` and the bootstrapped files.

    `.flow/` is kept out by unstaging it after `add -A`, not by an `:(exclude)` pathspec: git
    refuses such an add (exit 1, "paths are ignored") when `.flow/` is in info/exclude and also
    holds files a team tracks (`.flow/config.toml`, `.flow/roster.toml`). Resetting it leaves a
    tracked settings file exactly as its branch has it, whatever an agent did to the copy in the
    worktree (docs/repositories.md).
    """
    # A git repository of its own inside the worktree (a scaffolder's `git init`, a clone) is left
    # out: `add -A` would stage it as a link to a commit no one has, or fail on one with no commit
    # ("does not have a commit checked out"); the agent is told (engine/taskbody.py).
    apart = [f":(exclude,literal){path}" for path in embedded_repos(wt, env)]
    run_git(wt, ["add", "-A", "--", ".", *apart], what, env=env)
    run_git(wt, ["reset", "-q", "--", FLOW_DIR.rstrip("/")], what, env=env)
    _unstage_bootstrapped(wt, what, env)


def embedded_repos(wt: Path, env: dict[str, str] | None = None) -> list[str]:
    """The untracked folders of `wt` that are git repositories of their own (git lists each as one
    entry ending in `/` even when asked for every untracked file), without their `/`; `.flow/`'s
    left out. `ls-files --others` reads no tracked file: 10 ms on 25,000 files, `status` 70."""
    out = run_git(
        wt,
        ["ls-files", "--others", "--exclude-standard", "-z"],
        f"could not list the untracked files of the worktree {wt}",
        env=env,
    ).stdout
    return [entry[:-1] for entry in split_z(out) if entry.endswith("/") and not entry.startswith(FLOW_DIR)]


def _unstage_bootstrapped(wt: Path, what: str, env: dict[str, str] | None = None) -> None:
    private = private_git_dir(wt)
    listing = private / _BOOTSTRAPPED if private is not None else None
    if listing is None or not listing.is_file() or listing.stat().st_size == 0:
        return
    literal = {**(env or {}), "GIT_LITERAL_PATHSPECS": "1"}
    run_git(wt, ["reset", "-q", f"--pathspec-from-file={listing}", "--pathspec-file-nul"], what, env=literal)
