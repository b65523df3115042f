"""What pinning and sealing flowd's own git costs (docs/sandbox.md "flowd's own git").

One repository (`--files` files) with `--lanes` linked worktrees, as a run has them. In turn
(rounds interleave them, so all see the same machine load), in one lane's worktree:

- before: `git status` with the environment flowd gave its git before (hooks off, no pin, no
  sealed settings), the baseline;
- flowd now: `run_git` as flowd runs it (the admin dir found from the common dir's side, the
  pin, the sealed settings);
- and, alone, the Python parts: `pin_of` (finding the admin dir, first and known) and
  `check_admin` (detection's check of a lane's admin files after each step).

Prints medians and the ratio of flowd's `git status` to the baseline.

    .venv/bin/python bench/own_git.py [--files 2000] [--lanes 16] [--rounds 30]
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

from flowd.vcs import gitcli  # noqa: E402
from flowd.vcs.admin import check_admin  # noqa: E402
from flowd.vcs.gitops import Repo  # noqa: E402

ID = ["-c", "user.name=b", "-c", "user.email=b@b"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *ID, *args], cwd=cwd, check=True, capture_output=True)


def _setup(root: Path, files: int, lanes: int) -> tuple[Repo, Path]:
    repo_root = root / "repo"
    for i in range(files):
        path = repo_root / f"d{i % 50}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n", encoding="utf-8")
    _git(repo_root, "init", "-q", "-b", "main")
    _git(repo_root, "add", "-A")
    _git(repo_root, "commit", "-q", "-m", "init")
    repo = Repo(repo_root)
    wts = [repo.worktree_add(root / "lanes" / f"s{n}", f"story/e/s{n}", "main") for n in range(lanes)]
    return repo, wts[-1]


def _time(fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowd-bench-own-git-") as tmp:
        repo, wt = _setup(Path(tmp), args.files, args.lanes)
        before_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        before_env.update(
            {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "1",
             "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": os.devnull}
        )  # fmt: skip
        status = ["status", "--porcelain", "-z", "--untracked-files=all"]
        samples: dict[str, list[float]] = {
            k: [] for k in ("before", "now", "pin_first", "pin_known", "check")
        }
        gitcli.run_git(wt, status, "status")  # the index refreshed once: both read it as it is
        for n in range(args.rounds):
            before = lambda: subprocess.run(["git", *status], cwd=wt, env=before_env, capture_output=True)  # noqa: E731
            now = lambda: gitcli.run_git(wt, status, "status")  # noqa: E731
            for key, fn in (
                (("before", before), ("now", now)) if n % 2 else (("now", now), ("before", before))
            ):
                samples[key].append(_time(fn))
            gitcli._ADMINS.clear()  # a flowd that has not met the worktree: the scan of every admin dir
            samples["pin_first"].append(_time(lambda: gitcli.pin_of(wt)))
            samples["pin_known"].append(_time(lambda: gitcli.pin_of(wt)))
            samples["check"].append(_time(lambda: check_admin(repo.common_dir, wt)))
        med = {k: statistics.median(v) for k, v in samples.items()}
        print(f"{args.files} files, {args.lanes} lanes, {args.rounds} rounds (median ms)")
        print(f"  git status, before (hooks off only)       {med['before']:7.2f}")
        print(
            f"  git status, flowd now (pinned, sealed)    {med['now']:7.2f}   x{med['now'] / med['before']:.3f}"
        )
        print(f"  pin_of, worktree met before               {med['pin_known']:7.3f}")
        print(f"  pin_of, first meeting (scans {args.lanes} admin dirs) {med['pin_first']:7.3f}")
        print(f"  check_admin (a lane's admin files)        {med['check']:7.3f}")


if __name__ == "__main__":
    main()
