"""A generated 25,000-file repository for the tests of big-repository defaults (docs/repositories.md
"Big repositories"): files in folders of 100 (`pkg0000/mod00.py` …), one commit, written through
`git fast-import` (about 4 s here), as `bench/monorepo.py` makes its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

FILES = 25_000


def _blob(text: str) -> bytes:
    data = text.encode()
    return b"data %d\n%s\n" % (len(data), data)


def generate(repo: Path, files: int = FILES) -> Path:
    """A repository at `repo` (its `main` checked out) of `files` small files in folders of 100."""
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    stream = [b"commit refs/heads/main\n", b"committer t <t@t> 1700000000 +0000\n", _blob("generated")]
    for n in range(files):
        path = f"pkg{n // 100:04d}/mod{n % 100:02d}.py"
        stream.append(b"M 100644 inline " + path.encode() + b"\n" + _blob(f"# {path}\nVALUE = {n}\n"))
    stream.append(b"M 100644 inline README.md\n" + _blob("# big\n"))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(stream), check=True)
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=repo, check=True)
    return repo


def clone(origin: Path, to: Path) -> Path:
    """A user's checkout of `origin` (objects hard-linked, every file checked out)."""
    subprocess.run(["git", "clone", "-q", "--local", str(origin), str(to)], check=True)
    return to
