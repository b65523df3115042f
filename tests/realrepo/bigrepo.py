"""A generated 25,000-file repository for the tests of big-repository defaults (docs/repositories.md
"Big repositories"): files in folders of 100 (`pkg0000/mod00.py` …), one commit, written through
`git fast-import` (about 4 s here), as `bench/monorepo.py` makes its own.

Removing a 25,000-file tree just before writing another is slow on an ext4 without a journal
(this machine's: docs/performance.md "A big monorepo", inodes freed less than 60 s ago are not
reused), so the tests remove their checkouts together, after the last of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

FILES = 25_000


def _blob(text: str) -> bytes:
    data = text.encode()
    return b"data %d\n%s\n" % (len(data), data)


def generate(repo: Path, files: int = FILES, *, checkout: bool = True) -> Path:
    """A repository at `repo` of `files` small files in folders of 100, its `main` checked out
    unless `checkout` is False (a repository only cloned from needs no files)."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    stream = [b"commit refs/heads/main\n", b"committer t <t@t> 1700000000 +0000\n", _blob("generated")]
    for n in range(files):
        path = f"pkg{n // 100:04d}/mod{n % 100:02d}.py"
        stream.append(b"M 100644 inline " + path.encode() + b"\n" + _blob(f"# {path}\nVALUE = {n}\n"))
    stream.append(b"M 100644 inline README.md\n" + _blob("# big\n"))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(stream), check=True)
    if checkout:
        subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=repo, check=True)
    return repo


def clone(origin: Path, to: Path) -> Path:
    """A user's checkout of `origin` (objects hard-linked, every file checked out)."""
    # Parallel checkout, as flowd checks out (docs/repositories.md "Your hooks"): half the time here.
    subprocess.run(
        ["git", "-c", "checkout.workers=0", "clone", "-q", "--local", str(origin), str(to)], check=True
    )
    return to
