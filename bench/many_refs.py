"""A repository with many refs (release tags, remote branches: what a big monorepo's clone has),
against the same repository without them, in the same run (docs/repositories.md "Many refs").

Two repositories of one commit, one of them with `--refs` refs in its `packed-refs` (half tags,
half remote branches, all naming that commit; written as git writes the file, sorted), and the
same real 4-story epic on each (the scripted agent, gates `true`, `flowd run` in this process,
the default sandbox), rounds interleaved so both meet the same load. Prints each round's seconds
and the median ratio; nothing is asserted. Before flowd read `packed-refs` once per version of
the file (flowd/vcs/packed_refs.py), 100,000 refs made the epic 8 times as long.

    .venv/bin/python bench/many_refs.py [--refs 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.monorepo import epic_seconds, git  # noqa: E402


def repository(where: Path, refs: int) -> Path:
    """A repository of one commit, with `refs` packed refs naming it."""
    repo = where / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("# r\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init")
    head = git(repo, "rev-parse", "HEAD").strip()
    names = [f"refs/tags/v{n}" for n in range(refs // 2)] + [
        f"refs/remotes/origin/branch-{n}" for n in range(refs - refs // 2)
    ]
    names.append("refs/heads/main")
    lines = "".join(f"{head} {name}\n" for name in sorted(names))
    (repo / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled fully-peeled sorted \n{lines}")
    (repo / ".git" / "refs" / "heads" / "main").unlink()
    assert git(repo, "rev-parse", "main").strip() == head
    return repo


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--refs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    plain: list[float] = []
    many: list[float] = []
    load = os.getloadavg()
    print(f"a 4-story epic, without and with {args.refs} refs; load average {load[0]:.1f}")
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="flowd-bench-refs-") as tmp:
            for count, into in ((0, plain), (args.refs, many)):
                where = Path(tmp) / f"r{count}"
                where.mkdir()
                into.append(epic_seconds(repository(where, count))[0])
        print(f"  round {n + 1}: without {plain[-1]:.2f} s, with {many[-1]:.2f} s")
    ratio = statistics.median(many) / statistics.median(plain)
    print(
        f"median: without {statistics.median(plain):.2f} s, with {statistics.median(many):.2f} s = {ratio:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
