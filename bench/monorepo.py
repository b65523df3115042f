"""A big monorepo: flowd's worktree work against bare git doing the same, in the same run.

Generates (no download) a repository of `--files` files (25,000 by default) spread over folders
of 100, with commits of history each rewriting 2% of the files with a few KB of random text, until
there are `--commits` of them and `--history-mb` MB of objects (300 by default: about 300 commits,
each file a few KB at the tip), through `git fast-import` so the generation itself is quick. Then, rounds interleaved so both see the
same machine load:

- bare git: the least an epic of 4 stories needs: 5 `git worktree add` (the epic and 4 stories),
  a `git status` in each story worktree, the 5 removed;
- flowd: the same through `flowd.vcs.gitops` (what the engine calls), a perimeter listing
  (`changed_files`, what every task's scan runs) in place of each `git status`; each step right
  after bare git's same step, so both meet the same load;
- the perimeter scan alone against a bare `git status --porcelain` in one worktree.

With `--epic`, also a real 4-story epic (the scripted agent, gates `true`) on the monorepo and on a
one-file repository, and the monorepo epic against the small one plus one bare `git worktree add`;
the run is timed as `flowd run` takes it (until the outcome is written and the run returns, its
leftover worktrees removed by a background process), then until that removal has finished too.
The monorepo epic is read up to five ways (`--kinds`), each on a fresh clone: whole story worktrees
(`sparse = false`, `keepSpares = 0`), sparse ones (`sparse = true`), whole ones with `keepSpares =
5` after an earlier epic's run (not timed) left its 5 spares, and with nothing set in `[worktree]`
(flowd's own choice for a big repository, docs/repositories.md "Big repositories"): `first`, the
first run on the clone, and `next`, another epic run right after it on the same clone (what the
first left kept is what it finds); what flowd said about its choice is printed under each.

Prints medians and ratios; nothing is asserted.

    .venv/bin/python bench/monorepo.py [--files 25000] [--commits 3] [--history-mb 300] [--rounds 2]
        [--epic] [--epics 1] [--kinds whole,sparse,kept,first,next] [--git-profile]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.events.model import Envelope  # noqa: E402
from flowd.vcs.gitops import Repo  # noqa: E402

ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "b",
    "GIT_AUTHOR_EMAIL": "b@b",
    "GIT_COMMITTER_NAME": "b",
    "GIT_COMMITTER_EMAIL": "b@b",
}
STORIES = 4


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, env=ENV, capture_output=True, text=True).stdout


def _blob(text: str) -> bytes:
    data = text.encode()
    return b"data %d\n%s\n" % (len(data), data)


# What a rewritten file holds besides its header: random text (no delta, little compression), so
# the history's size is what `--history-mb` asks for and each file a few KB, like source files.
PAYLOAD = 2400


def generate(repo: Path, files: int, commits: int, history_mb: int = 0) -> None:
    """`files` files in folders of 100, then commits each rewriting 2% of them (with a random
    payload) until there are `commits` of them and the objects written reach `history_mb` MB."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    paths = [f"pkg{n // 100:04d}/mod{n % 100:02d}.py" for n in range(files)]
    importer = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=repo, stdin=subprocess.PIPE, env=ENV)
    assert importer.stdin is not None
    written, c = 0, 0
    while c <= commits or written < history_mb * 1_000_000:
        stream = [b"commit refs/heads/main\n", b"committer b <b@b> %d +0000\n" % (1_700_000_000 + c)]
        stream.append(_blob(f"generation {c}"))
        for path in paths if c == 0 else paths[c % 50 :: 50]:
            body = f"# {path} generation {c}\nVALUE = {c}\n" + "x = 1\n" * 20
            if c:
                body += "# " + base64.b64encode(os.urandom(PAYLOAD * 3 // 4)).decode() + "\n"
            stream.append(b"M 100644 inline " + path.encode() + b"\n" + _blob(body))
            written += len(body)
        importer.stdin.write(b"".join(stream))
        c += 1
    importer.stdin.close()
    if importer.wait() != 0:
        raise SystemExit("git fast-import failed")
    git(repo, "checkout", "-q", "-f", "main")


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


PHASES = ("add", "scan", "remove")


def paired_round(repo: Path, base: Path) -> dict[str, tuple[float, float]]:
    """One epic's worktree work done by bare git and by flowd, each step of one right after the
    same step of the other (on a shared, loaded machine a whole round of one then of the other
    would compare two different loads): seconds per phase, (bare, flowd)."""
    r = Repo(repo)
    bare = [base / f"bare{n}" for n in range(STORIES + 1)]
    ours = [base / f"flowd{n}" for n in range(STORIES + 1)]
    spent = {phase: [0.0, 0.0] for phase in PHASES}

    turn = [0]

    def pair(phase: str, bare_step: Callable[[], object], flowd_step: Callable[[], object]) -> None:
        # Who goes first alternates: the second of two big checkouts meets a warmer cache.
        turn[0] += 1
        if turn[0] % 2:
            spent[phase][0] += timed(bare_step)
            spent[phase][1] += timed(flowd_step)
        else:
            spent[phase][1] += timed(flowd_step)
            spent[phase][0] += timed(bare_step)

    for n in range(STORIES + 1):
        add = ["worktree", "add", "-q", "-b", f"bare/{base.name}/{n}", str(bare[n]), "main"]
        pair(
            "add",
            partial(git, repo, *add),
            partial(r.worktree_add, ours[n], f"flowd/{base.name}/{n}", "main"),
        )
    for n in range(1, STORIES + 1):
        pair(
            "scan", partial(git, bare[n], "status", "--porcelain"), partial(r.changed_files, ours[n], "main")
        )
    for n in range(STORIES + 1):
        remove = ["worktree", "remove", "--force", str(bare[n])]
        pair("remove", partial(git, repo, *remove), partial(r.worktree_remove, ours[n], force=True))
    return {phase: (pair_[0], pair_[1]) for phase, pair_ in spent.items()}


def scan_ratio(repo: Path, base: Path, rounds: int) -> tuple[float, float]:
    r = Repo(repo)
    wt = r.worktree_add(base / "scan", "scan/bench", "main")
    (wt / "pkg0000" / "mod00.py").write_text("changed\n", encoding="utf-8")
    bare = [timed(lambda: git(wt, "status", "--porcelain")) for _ in range(rounds * 3)]
    ours = [timed(lambda: r.changed_files(wt, "main")) for _ in range(rounds * 3)]
    r.worktree_remove(wt, force=True)
    return statistics.median(bare), statistics.median(ours)


def one_line_epic(repo: Path, epic: str, count: int, rules: list[dict[str, object]], config: str) -> Path:
    """An epic `epic` of `count` one-line stories in `repo` (`s<n>` owning `story<n>.txt`), its
    scripted roster (`rules`, one slot per story) and `.flow/config.toml` (`config`)."""
    stories = [
        {
            "id": f"s{n}",
            "title": f"Story {n}",
            "description": "one line",
            "owned": [f"story{n}.txt"],
            "dependsOn": [],
        }
        for n in range(count)
    ]
    plan = repo / f"{epic}.epic.json"
    plan.write_text(json.dumps({"epicId": epic, "epic": epic, "stories": stories}), encoding="utf-8")
    flow = repo / ".flow"
    flow.mkdir(exist_ok=True)
    (flow / "script.json").write_text(json.dumps({"model": "bench", "rules": rules}), encoding="utf-8")
    (flow / "roster.toml").write_text(
        f'[[executors]]\nid = "demo"\nkind = "script"\nscript = "script.json"\nslots = {count}\n'
        'roles = ["planner", "coder", "reviewer", "judge"]\n',
        encoding="utf-8",
    )
    (flow / "config.toml").write_text(config, encoding="utf-8")
    return plan


def _epic_repo(repo: Path, sparse: bool | None = False, epic: str = "bench", keep: int | None = 0) -> Path:
    """A 4-story epic (one-line stories, gates `true`) and a scripted roster in `repo`; `sparse`:
    the stories' worktrees check out only their perimeter; `keep`: spares left for the next run
    (docs/repositories.md); None: not set, as flowd chooses by default ("Big repositories")."""
    rules: list[dict[str, object]] = [
        {"when": {"role": "coder", "story": f"s{n}"}, "writes": {f"story{n}.txt": "x\n"}, "reply": "done"}
        for n in range(STORIES)
    ]
    worktree = (f"sparse = {str(sparse).lower()}\n" if sparse is not None else "") + (
        f"keepSpares = {keep}\n" if keep is not None else ""
    )
    return one_line_epic(
        repo,
        epic,
        STORIES,
        rules,
        'gates = ["true"]\njudgeRounds = 0\nconcurrency = 4\n'
        + (f"[worktree]\n{worktree}" if worktree else ""),
    )


def git_profile(trace: Path, top: int = 8) -> None:
    """The slowest git processes a run started (not their children), from a `GIT_TRACE2_EVENT`
    file: when each started, how long it took, what it was."""
    started: dict[str, tuple[str, list[str]]] = {}
    slowest: list[tuple[float, str, str]] = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        sid = event["sid"]
        if event["event"] == "start":
            started[sid] = (event["time"][11:23], event["argv"][1:6])
        elif event["event"] == "atexit" and sid in started and "/" not in sid:
            at, argv = started[sid]
            slowest.append((event["t_abs"], at, " ".join(argv)))
    for took, at, argv in sorted(slowest, reverse=True)[:top]:
        print(f"    {took:6.2f} s from {at}: git {argv}")
    # The parts: every git process the run started, by subcommand (after any `-c x=y`).
    parts: dict[str, list[float]] = {}
    for took, _, argv in slowest:
        words = argv.split()
        name = next((w for n, w in enumerate(words) if not w.startswith("-") and words[n - 1] != "-c"), "?")
        parts.setdefault(name, []).append(took)
    listed = ", ".join(
        f"{k} {len(v)}x {sum(v):.1f} s" for k, v in sorted(parts.items(), key=lambda kv: -sum(kv[1]))
    )
    print(f"    all {len(slowest)} git processes: {sum(t for t, _, _ in slowest):.1f} s ({listed})")


def epic_seconds(
    repo: Path,
    sparse: bool | None = False,
    trace: Path | None = None,
    epic: str = "bench",
    keep: int | None = 0,
    said: list[str] | None = None,
) -> tuple[float, float]:
    """Seconds until the run returned (as `flowd run` does: its leftover worktrees removed by a
    process of their own), and until that removal had finished too."""
    from flowd.engine.runner import RunOptions, run_epic

    plan = _epic_repo(repo, sparse, epic, keep)
    if trace is not None:
        os.environ["GIT_TRACE2_EVENT"] = str(trace)
    started = time.perf_counter()
    told: list[str] = []

    def heard(envelope: Envelope) -> None:
        message = getattr(envelope.event, "message", None)
        if (
            type(envelope.event).__name__ == "Info"
            and isinstance(message, str)
            and "big repository" in message
        ):
            told.append(message)

    options = RunOptions(plan=plan, cwd=repo, handle_signals=False, reap_in_background=True, on_event=heard)
    result = asyncio.run(run_epic(options))
    if said is not None:
        said.extend(told)
    took = time.perf_counter() - started
    if result.outcome != "done":
        raise SystemExit(f"the bench epic on {repo} ended {result.outcome}; see {repo}/.flow/runs/")
    while result.reaper is not None and Path(f"/proc/{result.reaper}").exists():
        if Path(f"/proc/{result.reaper}/stat").read_text().split(") ")[-1].startswith("Z"):
            break
        time.sleep(0.05)
    finished = time.perf_counter() - started
    os.environ.pop("GIT_TRACE2_EVENT", None)
    _removed()
    return took, finished


def print_rounds(rounds: list[dict[str, tuple[float, float]]], repo: Path, tmp: Path) -> None:
    for phase in PHASES:
        b = statistics.median(r[phase][0] for r in rounds)
        o = statistics.median(r[phase][1] for r in rounds)
        print(f"  {phase:<6}: bare git {b:6.2f} s, flowd {o:6.2f} s ({o / b:.2f}x)")
    b = statistics.median(sum(r[p][0] for p in PHASES) for r in rounds)
    o = statistics.median(sum(r[p][1] for p in PHASES) for r in rounds)
    print(f"5 worktrees added, 4 scanned, 5 removed: bare git {b:.2f} s, flowd {o:.2f} s ({o / b:.2f}x)")
    sb, so = scan_ratio(repo, tmp, len(rounds))
    print(
        f"perimeter scan of one worktree: git status {sb * 1000:.0f} ms, flowd {so * 1000:.0f} ms ({so / sb:.2f}x)"
    )


# When flowd's leftovers (or a previous round) were last removed: see `settle`.
_removed_at = 0.0

# ext4 without a journal (this project's CI machines: no /proc/fs/jbd2 entry) will not reuse an
# inode deleted less than 60 s ago, 300 s while its inode-table block is unwritten (the kernel's
# `recently_deleted` in fs/ext4/ialloc.c): each new file then scans past the freed ones, and a
# 25,000-file checkout right after a removal took 10-22 s of system time where it takes 1.1 s.
_INODE_REUSE_WAIT = 60.0


def settle(quiet: float = 5.0, longest: float = 120.0) -> None:
    """Wait until the file system has written back what the previous step left (a removal's
    discards, a checkout's dirty pages): `sync`, then until the kernel's I/O pressure (the share
    of the last 10 s some task waited on I/O) is under `quiet` %, and until a removal's inodes
    may be reused (above), so each measurement starts from the same state rather than paying for
    the one before."""
    subprocess.run(["sync"], check=False)
    pressure = Path("/proc/pressure/io")
    deadline = time.monotonic() + longest
    while pressure.is_file() and time.monotonic() < deadline:
        some = pressure.read_text().split()[1]  # "avg10=N"
        if float(some.split("=")[1]) < quiet:
            break
        time.sleep(1.0)
    time.sleep(max(0.0, _removed_at + _INODE_REUSE_WAIT - time.monotonic()))


def _removed() -> None:
    global _removed_at
    subprocess.run(["sync"], check=False)  # the freed inodes' table blocks written: 60 s, not 300
    _removed_at = time.monotonic()


def _fresh_copy(repo: Path, tmp: Path, kind: str) -> Path:
    """A clone of the generated repository for one epic (its own refs, runs and worktrees), its
    objects hard-linked, checked out: a user's checkout, as the epic's first run meets it."""
    copy = tmp / f"epic-{kind}"
    tmp.mkdir(parents=True, exist_ok=True)
    git(tmp, "clone", "-q", "--local", str(repo), str(copy))
    settle()
    return copy


def epic_round(repo: Path, tmp: Path, n: int, profile: bool, kinds: list[str]) -> dict[str, float]:
    """One reading of each epic of `kinds`: the small repository's, one bare add, then the
    monorepo's, each on a fresh clone after the file system settled ("first" and "next" share
    theirs: two epics one after the other with nothing set in `[worktree]`)."""
    settle()
    one_add = timed(lambda: git(repo, "worktree", "add", "-q", "--detach", str(tmp / f"one{n}"), "main"))
    small = tmp / f"small{n}"
    small.mkdir()
    (small / "README.md").write_text("# small\n", encoding="utf-8")
    git(small, "init", "-q", "-b", "main")
    git(small, "add", "-A")
    git(small, "commit", "-q", "-m", "init")
    e_small, _ = epic_seconds(small, sparse=None, keep=None)
    got = {"small": e_small, "add": one_add}
    goal = e_small + one_add
    print(f"4-story epic: small repo {e_small:.1f} s, one bare worktree add {one_add:.1f} s")
    clone: Path | None = None
    for kind in kinds:
        settle()
        sparse, keep = SETTINGS[kind]
        if kind != "next" or clone is None:
            clone = _fresh_copy(repo, tmp / f"r{n}", kind)
        if kind == "kept":  # an earlier epic's run leaves its spares (not timed)
            epic_seconds(clone, epic="earlier", keep=keep)
            settle()
        trace = tmp / f"trace2-{kind}{n}.json" if profile else None
        said: list[str] = []
        e_mono, e_all = epic_seconds(clone, sparse, trace, epic=kind, keep=keep, said=said)
        got[kind] = e_mono
        print(
            f"  monorepo, {KINDS[kind]}: {e_mono:.1f} s, / (small + one add) = {e_mono / goal:.2f}x; "
            f"until the leftovers' removal ended too: {e_all:.1f} s ({e_all / goal:.2f}x)"
        )
        for line in said:
            print(f"    flowd said: {line}")
        if trace is not None:
            git_profile(trace)
    return got


KINDS = {
    "whole": "whole story worktrees",
    "sparse": "sparse story worktrees",
    "kept": "whole, spares kept from an earlier epic",
    "first": "default settings, first run",
    "next": "default settings, the next run (another epic, same checkout)",
}
# Each kind's `[worktree] sparse` and `keepSpares` (None: not set).
SETTINGS: dict[str, tuple[bool | None, int | None]] = {
    "whole": (False, 0),
    "sparse": (True, 0),
    "kept": (False, STORIES + 1),  # the lanes and the train
    "first": (None, None),
    "next": (None, None),
}
GOALS = {"first": 2.0, "next": 1.2}


def print_epics(epics: list[dict[str, float]], kinds: list[str]) -> None:
    """Medians over the readings; each ratio is the median of the per-round ratios (a round's
    epics and its baseline met the same machine)."""
    med = {k: statistics.median(e[k] for e in epics) for k in epics[0]}
    listed = ", ".join(f"{kind} {med[kind]:.1f} s" for kind in kinds)
    print(
        f"medians of {len(epics)}: small repo {med['small']:.1f} s, one bare add {med['add']:.1f} s, {listed}"
    )
    for kind in kinds:
        ratios = sorted(e[kind] / (e["small"] + e["add"]) for e in epics)
        each = ", ".join(f"{r:.2f}x" for r in ratios)
        goal = GOALS.get(kind, 1.5)
        print(f"  {kind}: / (small + one add) median {statistics.median(ratios):.2f}x ({each}; goal {goal}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument("--commits", type=int, default=3, help="at least this many commits of history")
    parser.add_argument("--history-mb", type=int, default=300, help="and at least this much history")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--epic", action="store_true", help="also run a 4-story epic on it and on a small repo"
    )
    parser.add_argument("--epics", type=int, default=1, help="with --epic: readings of each epic")
    parser.add_argument(
        "--kinds",
        default="whole,sparse,kept,first,next",
        help="with --epic: which monorepo epics, of " + ", ".join(KINDS),
    )
    parser.add_argument(
        "--git-profile",
        action="store_true",
        help="with --epic: print the epics' slowest git processes (git's trace2 events)",
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each figure as it comes
    tmp = Path(tempfile.mkdtemp(prefix="flowd-monorepo-"))
    try:
        repo = tmp / "mono"
        took = timed(lambda: generate(repo, args.files, args.commits, args.history_mb))
        size = sum(f.stat().st_size for f in (repo / ".git").rglob("*") if f.is_file())
        count = git(repo, "rev-list", "--count", "main").strip()
        tip = sum(f.stat().st_size for f in repo.rglob("*.py"))
        print(
            f"repository: {args.files} files ({tip / 1e6:.0f} MB checked out), {count} commits, "
            f".git {size / 1e6:.0f} MB ({took:.1f} s)"
        )
        rounds = [paired_round(repo, tmp / f"round{n}") for n in range(args.rounds)]
        if rounds:
            _removed()
            print_rounds(rounds, repo, tmp)
        if args.epic:
            kinds = [k for k in args.kinds.split(",") if k]
            if unknown := [k for k in kinds if k not in KINDS]:
                raise SystemExit(f"--kinds: {', '.join(unknown)} not among {', '.join(KINDS)}")
            epics = [epic_round(repo, tmp, n, args.git_profile, kinds) for n in range(args.epics)]
            if len(epics) > 1:
                print_epics(epics, kinds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
