"""How much flowd's git layer costs over bare git, per story, on a 5,000-file repository.

Run: .venv/bin/python bench/overhead.py [--files 5000] [--stories 10]

A story's git life: worktree add (new branch off the epic), one commit of a few files, the list
of changed files, a --no-ff merge into the epic worktree, worktree remove, branch delete. The
same steps run once through flowd.vcs.gitops and once as the equivalent bare git commands, story by
story alternating so both see the same machine load. Prints per-story times and the ratio
(target: flowd <= 1.5x bare). Everything lives in one temp dir, removed at the end.
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

from flowd.vcs.gitops import Repo, worktree_default_root


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def build_repo(root: Path, files: int) -> None:
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Bench")
    git(root, "config", "user.email", "bench@example.com")
    for i in range(files):
        d = root / "src" / f"pkg{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"mod{i:05d}.py").write_text(f"# module {i}\nVALUE = {i}\n\ndef f{i}(x):\n    return x + {i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")


def write_work(wt: Path, name: str) -> None:
    for j in range(3):
        (wt / "stories" / name).mkdir(parents=True, exist_ok=True)
        (wt / "stories" / name / f"f{j}.py").write_text(f"# {name} {j}\n")
    (wt / "src" / "pkg000" / "mod00000.py").write_text(f"# touched by {name}\n")


def story_flowd(repo: Repo, epic: Path, wroot: Path, name: str) -> float:
    t0 = time.perf_counter()
    wt = repo.worktree_add(wroot / name, f"story/bench/{name}", start="epic/bench")
    write_work(wt, name)
    repo.commit_all(wt, f"{name}: work")
    changed = repo.changed_files(wt, "epic/bench")
    result = repo.merge(epic, f"story/bench/{name}", f"bench: merge story {name}")
    repo.worktree_remove(wt)
    repo.delete_branch(f"story/bench/{name}")
    elapsed = time.perf_counter() - t0
    assert result.ok and len(changed) == 4, (result, changed)
    return elapsed


def story_bare(root: Path, epic: Path, wroot: Path, name: str) -> float:
    t0 = time.perf_counter()
    wt = wroot / name
    branch = f"story/bare/{name}"
    git(root, "worktree", "add", "-q", "-b", branch, str(wt), "epic/bench")
    write_work(wt, name)
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", f"{name}: work")
    git(wt, "rev-parse", "HEAD")
    changed = git(wt, "diff", "--name-only", "--merge-base", "epic/bench").split()
    changed += git(wt, "ls-files", "--others", "--exclude-standard").split()
    git(epic, "merge", "--no-ff", "--no-edit", "-m", f"bench: merge {branch}", branch)
    git(root, "worktree", "remove", str(wt))
    git(root, "branch", "-D", "-q", branch)
    elapsed = time.perf_counter() - t0
    assert len(changed) == 4, changed
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--stories", type=int, default=10)
    parser.add_argument(
        "--dir",
        default="/dev/shm" if Path("/dev/shm").is_dir() else None,
        help="where the temp repository goes (default: /dev/shm when there is one, else the temp dir)",
    )
    args = parser.parse_args()
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    # In memory by default: disk noise (a checkout writes 5,000 files) would swamp what is measured,
    # flowd's own overhead, and bare git runs in the same place, so the ratio only gets stricter.
    with tempfile.TemporaryDirectory(prefix="flowd-bench-", dir=args.dir) as tmp:
        root = Path(tmp) / "proj"
        print(f"repository in {root}")
        t0 = time.perf_counter()
        build_repo(root, args.files)
        print(f"built a {args.files}-file repository in {time.perf_counter() - t0:.1f}s")
        t0 = time.perf_counter()
        repo = Repo.discover(root)
        print(f"Repo.discover: {(time.perf_counter() - t0) * 1000:.1f} ms (once per run)")
        wroot = worktree_default_root(repo) / "bench"
        epic = repo.worktree_add(wroot / "_epic", "epic/bench", start=repo.head())
        flowd_times: list[float] = []
        bare_times: list[float] = []
        # One untimed story each first: the page cache and git's own caches warm up.
        story_flowd(repo, epic, wroot, "warm-f")
        story_bare(root, epic, wroot, "warm-b")
        for i in range(args.stories):
            # Alternate who goes first: on this kind of disk a checkout gets slower as a run goes on.
            if i % 2:
                bare_times.append(story_bare(root, epic, wroot, f"b{i}"))
                flowd_times.append(story_flowd(repo, epic, wroot, f"f{i}"))
            else:
                flowd_times.append(story_flowd(repo, epic, wroot, f"f{i}"))
                bare_times.append(story_bare(root, epic, wroot, f"b{i}"))
        print(f"{'story':>6} {'flowd ms':>10} {'bare ms':>10}")
        for i, (f, b) in enumerate(zip(flowd_times, bare_times, strict=True)):
            print(f"{i:>6} {f * 1000:>10.1f} {b * 1000:>10.1f}")
        fm, bm = statistics.median(flowd_times), statistics.median(bare_times)
        ratio = fm / bm
        print(f"median per story: flowd {fm * 1000:.1f} ms, bare git {bm * 1000:.1f} ms, ratio {ratio:.2f}x")
        total = sum(flowd_times) / sum(bare_times)
        print(
            f"total over {args.stories} stories: flowd {sum(flowd_times):.2f}s, bare {sum(bare_times):.2f}s, ratio {total:.2f}x"
        )
        print(f"target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'}")
        repo.worktree_remove(epic, force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
