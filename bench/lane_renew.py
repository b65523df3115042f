"""What making a lane repository anew after every lane step costs (docs/sandbox.md "The lane
repository"), against the step's other lane-repository work, in one run, rounds interleaved:

- renew: `lane_repo.renew` after a step in which the lane planted a few entries (a hook, a config
  line, `config.worktree`, a `commondir`, a link): every entry removed, flowd's written again;
- baseline: the step-start `sync` (`exact`, nothing moved: the refs copy rewritten), as every step
  already pays, and the empty take-in (`LaneObjects.take`) before and after a step.

Goal: a renewal adds well under the cost of one confined process start (a few ms) per step.

    .venv/bin/python bench/lane_renew.py [--rounds 50] [--files 500] [--refs 100]
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
from flowd.vcs import lane_repo  # noqa: E402
from flowd.vcs.gitcli import private_git_dir  # noqa: E402


def setup(root: Path, files: int, refs: int) -> tuple[Path, Path]:
    repo = root / "repo"
    repo.mkdir()
    for i in range(files):
        (repo / f"f{i}.txt").write_text(f"{i}\n", encoding="utf-8")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    for i in range(refs):
        subprocess.run(["git", "branch", f"b{i}"], cwd=repo, check=True)
    wt = root / "repo.flowd" / "ep" / "a"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/a", str(wt)], cwd=repo, check=True)
    c = Confinement(
        "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=root / "repo.flowd", epic="ep",
    )  # fmt: skip
    with c.spawn(wt) as confined:  # makes the lane repository, as a lane's first process does
        subprocess.run(
            confined.argv(["true"]), cwd=wt, pass_fds=confined.pass_fds, preexec_fn=confined.preexec_fn
        )
    return repo, wt


def plant(home: Path) -> None:
    """What a lane might leave in its lane repository during a step."""
    (home / "hooks").mkdir(exist_ok=True)
    (home / "hooks" / "pre-commit").write_text("#!/bin/sh\n", encoding="utf-8")
    with (home / "config").open("a", encoding="utf-8") as handle:
        handle.write("[core]\n\tfsmonitor = true\n")
    (home / "config.worktree").write_text("[core]\n", encoding="utf-8")
    (home / "commondir").write_text("fake\n", encoding="utf-8")
    (home / "COMMIT_EDITMSG").write_text("x\n", encoding="utf-8")
    os.symlink("/etc", home / "link")


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--files", type=int, default=500, help="files in the index")
    parser.add_argument("--refs", type=int, default=100, help="branches in the refs copy")
    args = parser.parse_args()
    if landlock.abi() < 2:
        raise SystemExit("this benchmark needs the kernel's Landlock")
    with tempfile.TemporaryDirectory() as tmp:
        repo, wt = setup(Path(tmp), args.files, args.refs)
        common = repo / ".git"
        admin = private_git_dir(wt)
        assert admin is not None
        home = lane_repo.lane_git(admin)
        objects = LaneObjects(common, lambda _e: None, None)
        renew: list[float] = []
        sync: list[float] = []
        take: list[float] = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            objects.take("a", wt)
            take.append(time.perf_counter() - started)
            started = time.perf_counter()
            lane_repo.sync(common, admin, wt, exact=True)
            sync.append(time.perf_counter() - started)
            plant(home)
            started = time.perf_counter()
            lane_repo.renew(common, admin, wt)
            renew.append(time.perf_counter() - started)
            assert not (home / "hooks").exists()
        print(f"index of {args.files} files, {args.refs} branches, {args.rounds} rounds (medians)")
        print(f"  empty take-in:          {ms(take):6.2f} ms")
        print(f"  step-start sync:        {ms(sync):6.2f} ms")
        print(f"  renew (after a step):   {ms(renew):6.2f} ms  ({ms(renew) / ms(sync):.1f}x the sync)")


if __name__ == "__main__":
    main()
