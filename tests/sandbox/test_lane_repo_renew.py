"""A lane repository is made anew after every lane step (docs/sandbox.md "The lane repository"):
what a confined lane planted in its own git dir during a step (a `core.fsmonitor` command, hooks,
a `commondir` naming a git dir of its own, `config.worktree`, links) is gone once the step ended,
so your own unconfined git in the lane's worktree (a shell prompt's `git status`, an editor's git)
runs nothing of the lane's; a commit the lane made is taken in first."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from flowd.engine.lane_objects import LaneObjects
from flowd.sandbox.confine import Confinement, active
from flowd.vcs import lane_repo
from flowd.vcs.gitcli import private_git_dir
from flowd.vcs.gitops import Repo
from tests.sandbox.test_lane_repo import GIT_ID, make_repo


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    (tmp_path / "proof").mkdir()
    return make_repo(tmp_path, ("a",))


def _plant(proof: Path, commondir: bool) -> str:
    """The lane's script: a commit of its own, then a command in every place your git reads, with
    its objects reachable (alternates: your store and its quarantine) so your git gets that far;
    `commondir`: a git dir of its own, its config naming the command, as the lane repository's
    common dir (git then reads config, hooks and refs there)."""
    run = f"touch {proof}/$1"
    hook = f"#!/bin/sh\ntouch {proof}/hook-$(basename $0)\n"
    script = f"""set -e
echo x > new.txt && git add new.txt && git commit -q -m 'by its agent'
g=$(git rev-parse --absolute-git-dir)
mkdir -p "$g/objects/info"
printf '%s\\n%s\\n' "$GIT_OBJECT_DIRECTORY" "$GIT_ALTERNATE_OBJECT_DIRECTORIES" > "$g/objects/info/alternates"
git config core.fsmonitor '{run.replace("$1", "fsmonitor")}; false'
git config extensions.worktreeConfig true
mkdir -p "$g/hooks" "$g/info" "$g/locked/deeper"
for h in pre-commit post-index-change post-commit reference-transaction; do
  printf '{hook}' > "$g/hooks/$h"; chmod +x "$g/hooks/$h"
done
printf '[core]\\n\\tfsmonitor = "{run.replace("$1", "worktree")}; false"\\n' > "$g/config.worktree"
printf '* filter=evil\\n' > "$g/info/attributes"
ln -s {proof} "$g/link"
chmod 000 "$g/locked/deeper" "$g/locked"
"""
    if commondir:
        script += f"""mkdir -p "$g/fake/objects/info" "$g/fake/refs/heads/story/ep"
cp "$g/objects/info/alternates" "$g/fake/objects/info/alternates"
cp "$g/refs/heads/story/ep/a" "$g/fake/refs/heads/story/ep/a"
cp -r "$g/hooks" "$g/fake/hooks"
printf '[core]\\n\\tfsmonitor = "{run.replace("$1", "commondir")}; false"\\n' > "$g/fake/config"
printf 'fake\\n' > "$g/commondir"
"""
    return script


@pytest.mark.parametrize("commondir", [False, True])
def test_a_lane_repository_is_made_anew_after_each_step(repo: Repo, tmp_path: Path, commondir: bool) -> None:
    a = tmp_path / "repo.flowd" / "ep" / "a"
    proof = tmp_path / "proof"
    c = Confinement(
        "enforce", checkout=repo.root, common_dir=repo.common_dir, lanes_root=tmp_path / "repo.flowd",
        epic="ep", home=tmp_path / "home", allow_read=[], allow_write=[],
    )  # fmt: skip
    objects = LaneObjects(repo.common_dir, lambda _e: None, None)

    async def one_step() -> subprocess.CompletedProcess[str]:
        async with objects.step("a", a, contextlib.nullcontext()):
            with c.spawn(a) as confined:
                return subprocess.run(
                    confined.argv(["/bin/sh", "-c", _plant(proof, commondir)]), cwd=a,
                    env={**os.environ, **GIT_ID, **confined.env}, pass_fds=confined.pass_fds,
                    preexec_fn=confined.preexec_fn, capture_output=True, text=True,
                )  # fmt: skip

    with active(c):
        done = asyncio.run(one_step())
    assert done.returncode == 0, done.stdout + done.stderr
    admin = private_git_dir(a)
    assert admin is not None and lane_repo.active(admin)
    # The lane's commit was taken in before the lane repository was made anew.
    log = subprocess.run(
        ["git", "log", "-1", "--format=%s", "story/ep/a"], cwd=repo.root, capture_output=True, text=True
    )
    assert log.stdout.strip() == "by its agent"
    # Only flowd's entries are left, its config flowd's own.
    home = lane_repo.lane_git(admin)
    listing = sorted(
        os.path.relpath(os.path.join(top, n), home)
        for top, dirs, files in os.walk(home)
        for n in dirs + files
    )
    # (`info/exclude`: your repository's, copied: `git init` made one.)
    assert listing == ["HEAD", "config", "index", "info", "info/exclude", "logs", "objects", "objects/info",
                       "objects/info/alternates",
                       "packed-refs", "refs", "refs/heads", "refs/heads/story", "refs/heads/story/ep",
                       "refs/heads/story/ep/a"]  # fmt: skip
    assert (home / "objects" / "info" / "alternates").read_text(encoding="utf-8").split() == [
        str(repo.common_dir / "objects"),
        str(admin / "flowd-objects"),
    ]
    assert (home / "config").read_bytes() == lane_repo._config(repo.common_dir, admin)
    # You, unconfined, in the lane's worktree: a shell prompt's status, a commit.
    plain = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env = {**plain, **GIT_ID}
    for args in (["status"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        out = subprocess.run(["git", *args], cwd=a, env=env, capture_output=True, text=True)
        assert out.returncode == 0, (args, out.stdout + out.stderr)
    assert sorted(os.listdir(proof)) == []


def test_a_commit_made_after_the_take_in_outlives_the_renewal(repo: Repo, tmp_path: Path) -> None:
    """A lane's commit flowd has not taken in yet (a stray's, after the step's take-in) keeps its
    branch value through `renew`: the next take-in still sees the move and takes it."""
    a = tmp_path / "repo.flowd" / "ep" / "a"
    c = Confinement(
        "enforce", checkout=repo.root, common_dir=repo.common_dir, lanes_root=tmp_path / "repo.flowd",
        epic="ep", home=tmp_path / "home", allow_read=[], allow_write=[],
    )  # fmt: skip
    with c.spawn(a) as confined:
        done = subprocess.run(
            confined.argv(["/bin/sh", "-c", "echo y > late.txt && git add late.txt && git commit -qm late"]),
            cwd=a, env={**os.environ, **GIT_ID, **confined.env}, pass_fds=confined.pass_fds,
            preexec_fn=confined.preexec_fn, capture_output=True, text=True,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    admin = private_git_dir(a)
    assert admin is not None
    (lane_repo.lane_git(admin) / "hooks").mkdir()
    lane_repo.renew(repo.common_dir, admin, a)
    assert not (lane_repo.lane_git(admin) / "hooks").exists()
    LaneObjects(repo.common_dir, lambda _e: None, None).take("a", a)
    log = subprocess.run(
        ["git", "log", "-1", "--format=%s", "story/ep/a"], cwd=repo.root, capture_output=True, text=True
    )
    assert log.stdout.strip() == "late"


def test_parallel_steps_in_one_worktree_renew_it_once_the_last_ends(repo: Repo, tmp_path: Path) -> None:
    """Two steps of one worktree (parallel tasks): the first to end leaves the lane repository to
    the other, still running (its git may be half way through a commit); the last renews it."""
    a = tmp_path / "repo.flowd" / "ep" / "a"
    c = Confinement(
        "enforce", checkout=repo.root, common_dir=repo.common_dir, lanes_root=tmp_path / "repo.flowd",
        epic="ep", home=tmp_path / "home", allow_read=[], allow_write=[],
    )  # fmt: skip
    with c.spawn(a):
        pass  # the lane repository made, as a lane's first process makes it
    admin = private_git_dir(a)
    assert admin is not None
    planted = lane_repo.lane_git(admin) / "hooks"
    objects = LaneObjects(repo.common_dir, lambda _e: None, None)
    seen: list[bool] = []

    async def two_steps() -> None:
        first_in, first_out = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with objects.step("a", a, contextlib.nullcontext()):
                planted.mkdir()
                first_in.set()
            first_out.set()

        async def second() -> None:
            await first_in.wait()
            async with objects.step("a", a, contextlib.nullcontext()):
                await first_out.wait()
                seen.append(planted.exists())  # the first step ended: still there

        await asyncio.gather(second(), first())

    with active(c):
        asyncio.run(two_steps())
    assert seen == [True] and not planted.exists()
