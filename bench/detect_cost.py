"""Detection's cost per step (docs/sandbox-detection.md): what flowd adds after every agent turn,
task gate and setup command, against the cheapest gate there is (`sh -c true`) measured in the
same run.

Builds a repository of `--files` tracked files with `--refs` branches and `--lanes` story worktrees,
then times, `--rounds` times each: the shared check a step waits for (git config, hooks, info,
refs, flowd's files, the home directory), the scan of the user's checkout (run beside the steps),
a lane worktree's snapshot and its check, the stray process scan, and the whole step a lane waits
for (shared check + snapshot + scan). Prints medians in ms and each as a ratio of the `sh -c true`
baseline.

    .venv/bin/python bench/detect_cost.py [--files 2000] [--refs 200] [--lanes 8] [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.engine.detect import Detector  # noqa: E402
from flowd.engine.lane_procs import lane_processes  # noqa: E402


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=cwd, check=True,
                   capture_output=True)  # fmt: skip


def _repo(tmp: Path, files: int, refs: int, lanes: int) -> tuple[Path, list[Path]]:
    repo = tmp / "repo"
    for n in range(files):
        path = repo / f"src/pkg{n % 40}/mod{n}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {n}\n")
    (repo / ".flow").mkdir()
    (repo / ".flow" / "config.toml").write_text("concurrency = 8\n")
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")
    for n in range(refs):
        _git(repo, "branch", f"topic/{n}")
    _git(repo, "branch", "epic/ep")
    worktrees = []
    for n in range(lanes):
        wt = tmp / "repo.flowd" / "ep" / f"s{n}"
        _git(repo, "worktree", "add", "-q", "-b", f"story/ep/s{n}", str(wt), "epic/ep")
        worktrees.append(wt)
    return repo, worktrees


def _median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--refs", type=int, default=200)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        home = tmp / "home"
        home.mkdir()
        (home / ".bashrc").write_text("# bench\n")
        repo, worktrees = _repo(tmp, args.files, args.refs, args.lanes)
        detector = Detector(
            root=repo,
            common_dir=repo / ".git",
            epic_id="ep",
            epic_wt=tmp / "repo.flowd" / "ep" / "_epic",
            worktree_root=tmp / "repo.flowd",
            emit=lambda event: None,
            home=home,
        )
        detector.start()
        wt = worktrees[0]
        detector.snapshot(wt)
        figures = {
            "baseline: sh -c true": _median_ms(
                lambda: subprocess.run(["sh", "-c", "true"], check=True), args.rounds
            ),
            "shared check (the step waits for it)": _median_ms(
                lambda: detector.check_shared(checkout=False), args.rounds
            ),
            "checkout scan (beside the steps)": _median_ms(detector.check_checkout, args.rounds),
            "lane worktree snapshot": _median_ms(lambda: detector.snapshot(wt), args.rounds),
            "lane worktree check": _median_ms(lambda: detector.check_lane_worktree("s0", wt), args.rounds),
            "stray process scan": _median_ms(lambda: lane_processes("s0", 0.0, (tmp,)), args.rounds),
        }
        waited = ("shared check (the step waits for it)", "lane worktree snapshot", "stray process scan")
        figures["whole step (check + snapshot + scan)"] = sum(figures[k] for k in waited)
        base = figures["baseline: sh -c true"]
        print(f"detection cost per step: {args.files} files, {args.refs} refs, {args.lanes} lanes, "
              f"median of {args.rounds}")  # fmt: skip
        for label, ms in figures.items():
            print(f"  {label:<40} {ms:8.2f} ms  {ms / base:6.2f}x")


if __name__ == "__main__":
    main()
