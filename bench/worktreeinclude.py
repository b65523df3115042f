"""`.worktreeinclude` of a 200 MB ignored tree: a lane's preparation against `cp -r`, in the same run.

Generates a `node_modules/`-like ignored tree (`--small` files of a few KB over nested package
folders, plus `--big` files of several MB; about 200 MB in all) in a repository whose
`.worktreeinclude` lists it. Each round, in alternating order so every copy meets the same load:

- flowd: `bootstrap_files` into a fresh worktree (git's listing of what matches, and the copy);
- `cp -r node_modules <worktree>/`;
- `cp -r --reflink=auto node_modules <worktree>/` (a clone where the file system can);
- `cp -a --reflink=auto` (also keeps timestamps, as flowd does).

Each copy's destination is removed and the page cache is not dropped (no root): every copy
reads a warm source. Prints medians and flowd's ratio to each (goal: <= 1.2x `cp -r`).

    .venv/bin/python bench/worktreeinclude.py [--small 20000] [--big 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.monorepo import git  # noqa: E402
from flowd.engine import bootstrap  # noqa: E402
from flowd.engine.bootstrap import bootstrap_files  # noqa: E402
from flowd.store.config import Settings  # noqa: E402
from flowd.vcs.gitops import Repo  # noqa: E402


def generate(repo: Path, small: int, big: int) -> int:
    """A repository with an ignored `node_modules/` that `.worktreeinclude` lists; its bytes."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("node_modules/\n", encoding="utf-8")
    (repo / ".worktreeinclude").write_text("node_modules/\n", encoding="utf-8")
    (repo / "index.js").write_text("module.exports = 1\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    total = 0
    modules = repo / "node_modules"
    for n in range(small):
        # ~400 packages of ~50 files, two folder levels deep, 1-9 KB each (~100 MB).
        folder = modules / f"pkg{n // 50:03d}" / ("lib" if n % 3 else "dist") / f"part{n % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        body = os.urandom(512) * (2 + n % 17)
        (folder / f"file{n}.js").write_bytes(body)
        total += len(body)
    for n in range(big):
        body = os.urandom(1 << 20) * 25  # 25 MB each: the prebuilt binaries
        (modules / f"pkg{n:03d}" / f"native{n}.node").write_bytes(body)
        total += len(body)
    return total


def clone_word(src: Path, dest: Path) -> str:
    probe = getattr(bootstrap, "clone_support", None)
    return "unknown" if probe is None else ("yes" if probe(src, dest) else "no")


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process's threads and of its children) of `action`.
    On a shared machine the CPU time is the steadier figure: waiting for a core does not count."""
    subprocess.run(["sync"], check=False)  # the previous copy's writeback does not land on this one
    wall, cpu, kids = time.perf_counter(), time.process_time(), _children_cpu()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu + _children_cpu() - kids


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--big", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flowd-wtinclude-", dir=os.environ.get("BENCH_DIR")))
    try:
        repo_dir = tmp / "repo"
        size = generate(repo_dir, args.small, args.big)
        repo, settings = Repo(repo_dir), Settings()
        wt = repo.worktree_add(tmp / "wt", "bench/wt", "main")
        fs = subprocess.run(
            ["stat", "-f", "-c", "%T", str(tmp)], capture_output=True, text=True
        ).stdout.strip()
        print(
            f"ignored tree: {args.small + args.big} files, {size / 1e6:.0f} MB on {fs} ({tmp}); "
            f"clone (reflink) here: {clone_word(repo_dir, wt)}"
        )

        def flowd() -> None:
            copied = bootstrap_files(repo, settings, wt)
            assert len(copied.copied) == args.small + args.big, copied.skipped[:3]

        commands = {
            "cp -r": ["cp", "-r"],
            "cp -r --reflink=auto": ["cp", "-r", "--reflink=auto"],
            "cp -a --reflink=auto": ["cp", "-a", "--reflink=auto"],
        }
        spent: dict[str, list[tuple[float, float]]] = {"flowd": [], **{name: [] for name in commands}}
        order = ["flowd", *commands]
        for n in range(args.rounds):
            for name in order[n % len(order) :] + order[: n % len(order)]:
                shutil.rmtree(wt / "node_modules", ignore_errors=True)
                if name == "flowd":
                    spent[name].append(timed(flowd))
                else:
                    argv = [*commands[name], str(repo_dir / "node_modules"), str(wt / "node_modules")]
                    spent[name].append(timed(lambda argv=argv: subprocess.run(argv, check=True)))
        walls = {name: statistics.median(t[0] for t in times) for name, times in spent.items()}
        cpus = {name: statistics.median(t[1] for t in times) for name, times in spent.items()}
        print(f"medians of {args.rounds} rounds: wall (CPU)")
        for name in spent:
            ratio = ""
            if name != "flowd":
                ratio = f"   flowd / this = {walls['flowd'] / walls[name]:.2f}x ({cpus['flowd'] / cpus[name]:.2f}x)"
            print(f"  {name:<22} {walls[name]:6.2f} s ({cpus[name]:5.2f} s){ratio}")
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
