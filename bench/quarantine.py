"""What the quarantined object store costs (docs/sandbox.md "The quarantine"), against today's
policy (a confined lane writing the shared store), in one run, rounds interleaved:

- per commit: a confined `git add` + `git commit` of a few files in a lane worktree, then, with the
  quarantine, flowd taking the commit in (`LaneObjects.take`, as after every lane step); today's
  variant is the same commit with the shared `objects/` writable and no take-in;
- take-in alone: the same take-in, timed by itself (the part flowd adds per step with a commit);
  and the same again in a third lane with the worktree's index read by `git read-tree` (the
  take-in before flowd/vcs/index_reset.py), the baseline of that part;
- empty take-in: a step that wrote no object (flowd looks at the quarantine before and after
  every step);
- per story: a normal story, `--commits` steps of one commit each (plus the empty look before
  each step), summed;
- the designs not taken, the same commit brought in from a lane repository sharing the store by
  alternates (`git clone --shared`): `git fetch` from it (`fetch.fsckObjects`), and `git push`
  into the repository, which is git's own quarantine (`receive-pack`'s `tmp_objdir`,
  `receive.fsckObjects`); the transfer alone, the lane's commit not counted.

Goal: at most 5 ms per commit of a normal story.

    .venv/bin/python bench/quarantine.py [--rounds 20] [--commits 6] [--files 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.engine.lane_objects import LaneObjects  # noqa: E402
from flowd.sandbox import landlock  # noqa: E402
from flowd.sandbox.confine import Confinement  # noqa: E402
from flowd.vcs import index_reset  # noqa: E402

ID = {
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}


def lane(root: Path, name: str) -> tuple[Path, Path]:
    repo = root / "repo"
    if not repo.exists():
        repo.mkdir()
        # No `gc --auto` in the middle (the designs' transfers below add a pack each): it would
        # repack in the background while the figures are read.
        steps = (
            ["init", "-q", "-b", "main"],
            ["config", "gc.auto", "0"],
            ["commit", "-q", "--allow-empty", "-m", "init"],
        )
        for args in steps:
            subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo, check=True)
    wt = root / "repo.flowd" / "ep" / name
    subprocess.run(["git", "worktree", "add", "-q", "-b", f"story/ep/{name}", str(wt)], cwd=repo, check=True)
    return repo, wt


def confinement(repo: Path, today: bool) -> Confinement:
    """Today's policy is the shared store writable (`allowWrite`) and no quarantine in the env."""
    return Confinement(
        "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=repo.parent / "repo.flowd", epic="ep",
        allow_write=[str(repo / ".git" / "objects")] if today else [],
    )  # fmt: skip


def commit(c: Confinement, wt: Path, n: int, files: int, today: bool) -> None:
    """A confined commit of `files` files in `wt`: contents of this lane's own (the same bytes in
    two lanes would be one object, already in the store, and nothing would come in)."""
    script = (
        " && ".join(f"echo {wt.name}{n}-{i} > f{i}.txt" for i in range(files))
        + f" && git add -A && git commit -q -m c{n}"
    )
    with c.spawn(wt) as confined:
        env = {**os.environ, **ID, **confined.env}
        if today:  # its git writes the shared store itself (the lane repository has no store)
            env["GIT_OBJECT_DIRECTORY"] = str(c.common_dir / "objects")
            env.pop("GIT_ALTERNATE_OBJECT_DIRECTORIES", None)
        done = subprocess.run(
            confined.argv(["/bin/sh", "-c", script]),
            cwd=wt,
            env=env,
            pass_fds=confined.pass_fds,
            preexec_fn=confined.preexec_fn,
            capture_output=True,
            text=True,
        )
    assert done.returncode == 0, done.stderr


def take_by_git(objects: LaneObjects, c: Confinement, wt: Path, n: int, files: int) -> float:
    """A commit in the third lane, then its take-in timed with the index read by `git read-tree`
    (index_reset declining, as it does for an index it leaves to git)."""
    commit(c, wt, n, files, today=False)
    flowd_reset = index_reset.reset
    index_reset.reset = lambda *_: None
    try:
        started = time.perf_counter()
        objects.take("git", wt)
        return time.perf_counter() - started
    finally:
        index_reset.reset = flowd_reset


def lane_repo(root: Path, repo: Path) -> tuple[Path, Path]:
    """Design (c): a repository of the lane's own, the user's store its alternate; the designs
    bring their commits into a copy of the repository (their packs would slow the git of the
    figures above)."""
    target, own = root / "designs", root / "lane-repo"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(target)], check=True)
    subprocess.run(["git", "clone", "-q", "--shared", str(target), str(own)], check=True)
    return own, target


def transfer(own: Path, repo: Path, n: int, files: int, how: str) -> float:
    """One commit in the lane repository, then (timed) brought into the user's repository."""
    script = (
        " && ".join(f"echo {how}{n}-{i} > f{i}.txt" for i in range(files))
        + f" && git add -A && git commit -q -m c{n}"
    )
    subprocess.run(["/bin/sh", "-c", script], cwd=own, env={**os.environ, **ID}, check=True)
    started = time.perf_counter()
    if how == "fetch":
        args = [
            "-c",
            "fetch.fsckObjects=true",
            "fetch",
            "-q",
            "--no-tags",
            str(own),
            f"+HEAD:refs/heads/lane-{how}",
        ]
        subprocess.run(["git", *args], cwd=repo, check=True)
    else:
        args = ["push", "-q", "-f", str(repo), f"HEAD:refs/heads/lane-{how}"]
        env = {
            **os.environ,
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "receive.fsckObjects",
            "GIT_CONFIG_VALUE_0": "true",
        }
        done = subprocess.run(["git", *args], cwd=own, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the push of design (b) failed: {done.stderr.strip()}")
    return time.perf_counter() - started


def ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:6.2f} ms, mean {statistics.fmean(values) * 1000:6.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--commits", type=int, default=6, help="commits of a normal story")
    parser.add_argument("--files", type=int, default=3, help="files changed per commit")
    args = parser.parse_args()
    assert landlock.abi() >= 2, "the benchmark needs Landlock (Linux 5.19+)"
    with tempfile.TemporaryDirectory(prefix="flowd-bench-q-") as tmp:
        root = Path(tmp)
        repo, wt_new = lane(root, "new")
        _, wt_old = lane(root, "old")
        _, wt_git = lane(root, "git")
        new, old = confinement(repo, today=False), confinement(repo, today=True)
        objects = LaneObjects(repo / ".git", lambda _e: None, None)
        objects.take("new", wt_new)
        objects.take("git", wt_git)
        own, designs = lane_repo(root, repo)
        today, quarantined, take, empty, story_today, story_new = [], [], [], [], [], []
        take_git: list[float] = []
        fetched: list[float] = []
        pushed: list[float] = []
        n = 0
        for _ in range(args.rounds):
            per_story_old = per_story_new = 0.0
            for _ in range(args.commits):
                n += 1
                started = time.perf_counter()
                commit(old, wt_old, n, args.files, today=True)
                today.append(time.perf_counter() - started)
                per_story_old += today[-1]
                started = time.perf_counter()
                objects.take("new", wt_new)  # the look before the step: nothing there
                looked = time.perf_counter()
                commit(new, wt_new, n, args.files, today=False)
                committed = time.perf_counter()
                objects.take("new", wt_new)
                ended = time.perf_counter()
                empty.append(looked - started)
                take.append(ended - committed)
                quarantined.append(ended - looked)
                per_story_new += ended - started
                take_git.append(take_by_git(objects, new, wt_git, n, args.files))
                fetched.append(transfer(own, designs, n, args.files, "fetch"))
                pushed.append(transfer(own, designs, n, args.files, "push"))
            story_today.append(per_story_old)
            story_new.append(per_story_new)
        check = subprocess.run(
            ["git", "fsck", "--full", "--no-dangling"], cwd=repo, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stderr
    extra = [q - t for q, t in zip(quarantined, today, strict=True)]
    print(
        f"quarantine: {args.rounds} rounds x {args.commits} commits of {args.files} files, git {git_version()}"
    )
    print(f"  per commit, today (shared store writable): {ms(today)}")
    print(f"  per commit, quarantined + taken in:        {ms(quarantined)}")
    print(f"  take-in alone (after a step with a commit): {ms(take)}")
    print(f"  take-in, the index by git's read-tree:      {ms(take_git)}")
    print(f"  empty take-in (a step with no object):      {ms(empty)}")
    print(f"  per commit, added:                          {ms(extra)}")
    print(f"  design (c), fetch from a lane repository:   {ms(fetched)}")
    print(f"  design (b), push (receive-pack's quarantine): {ms(pushed)}")
    print(f"  per story, today:                           {ms(story_today)}")
    print(f"  per story, quarantined:                     {ms(story_new)}")
    ratio = statistics.median(story_new) / statistics.median(story_today)
    added = (statistics.median(story_new) - statistics.median(story_today)) / args.commits
    print(f"  per story: {ratio:.2f}x today's; {added * 1000:.2f} ms added per commit (goal <= 5 ms)")


def git_version() -> str:
    return subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.split()[-1]


if __name__ == "__main__":
    main()
