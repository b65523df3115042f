"""A repository with many refs (release tags, remote branches: what a big monorepo's clone has),
against the same repository without them, in the same run (docs/repositories.md "Many refs").

Two repositories of one commit, one of them with `--refs` refs in its `packed-refs` (half tags,
half remote branches, all naming that commit; written as git writes the file, sorted), and the
same real 4-story epic on each (the scripted agent, gates `true`, `flowd run` in this process,
the default sandbox), rounds interleaved so both meet the same load. Prints each round's seconds
and the median ratio; nothing is asserted. Before flowd read `packed-refs` once per version of
the file (flowd/vcs/packed_refs.py), 100,000 refs made the epic 8 times as long.

With `--loose`, the refs are loose files (`git update-ref`), as fetches leave them until a `git gc`
packs them (20,000 is a lot: a clone's refs come packed).

    .venv/bin/python bench/many_refs.py [--refs 100000] [--rounds 3] [--loose]
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

from bench.monorepo import epic_seconds, git  # noqa: E402


def repository(where: Path, refs: int, loose: bool = False) -> Path:
    """A repository of one commit, with `refs` refs naming it: packed, or `loose` files (as many
    fetches leave them before a `git gc` packs them)."""
    repo = where / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README.md").write_text("# r\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "-m", "init")
    head = git(repo, "rev-parse", "HEAD").strip()
    names = [f"refs/tags/v{n}" for n in range(refs // 2)] + [
        f"refs/remotes/origin/branch-{n}" for n in range(refs - refs // 2)
    ]
    if loose:
        made = "".join(f"create {name} {head}\n" for name in names)
        subprocess.run(["git", "update-ref", "--stdin"], cwd=repo, input=made, text=True, check=True)
        return repo
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
    parser.add_argument("--loose", action="store_true", help="the refs as loose files, not packed")
    args = parser.parse_args()
    plain: list[float] = []
    many: list[float] = []
    load = os.getloadavg()
    kind = "loose" if args.loose else "packed"
    print(f"a 4-story epic, without and with {args.refs} {kind} refs; load average {load[0]:.1f}")
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="flowd-bench-refs-") as tmp:
            made = {}
            for count in (0, args.refs):
                where = Path(tmp) / f"r{count}"
                where.mkdir()
                made[count] = repository(where, count, args.loose)
            # Your refs were not written in the second before the run: flowd trusts what it read
            # of them only once they are a second older than that read (flowd/vcs/loose_refs.py).
            time.sleep(1.1)
            for count, into in ((0, plain), (args.refs, many)):
                into.append(epic_seconds(made[count])[0])
        print(f"  round {n + 1}: without {plain[-1]:.2f} s, with {many[-1]:.2f} s")
    ratio = statistics.median(many) / statistics.median(plain)
    print(
        f"median: without {statistics.median(plain):.2f} s, with {statistics.median(many):.2f} s = {ratio:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
