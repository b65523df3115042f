"""Kill campaign: SIGKILL `flowd run` at seeded random moments, rerun until it ends, then prove
nothing was lost or doubled.

Run: .venv/bin/python bench/kill_resume.py [--kills 20] [--stories 10] [--seed 7]

The epic: up to 10 stories with dependencies, two real gates (every Python file parses; a
policy gate that refuses `src/flaky.py` on the epic, so story `flaky` is sent back by the merge
train and fails every run, and its dependent waits). The scripted ACP agent plays every role.

A kill waits for a seeded random moment on the runner's `--json` stdout — task planning, a
coder turn, a gate, a merge, a red epic gate before its story is sent back, right after a merge,
a merge train batch being gated, a bisection under way, the report — then SIGKILLs the runner's process group. The next run resumes. When a run ends on
its own, the round is checked against one uninterrupted reference run:

- the epic branch's tree equals the reference's (same paths, same contents);
- every story the reference merged is merged exactly once (`<epic>: merge story <id>`);
- the worktrees and branches are the reference's (no orphans), nothing stray in the worktree root;
- every `.flow/**/*.json` parses; no epic lock is left;
- folding the last trace leaves no clone held; `.flow/roster-state.json` has no exclusion;
- the last run's exit code is the reference's; no agent or gate process outlives its runner.

Kills left when a round ends start a new round on a fresh repository. Prints kills survived /
kills tried and each check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.trace.log import list_runs, read_trace, trace_path  # noqa: E402
from flowd.trace.view import fold  # noqa: E402
from tests.engine.scenario import FLOWD, Scenario, git, story  # noqa: E402

EPIC = "ep"
PARSE_GATE = (
    "python3 -c \"import ast,pathlib; [ast.parse(p.read_text()) for p in pathlib.Path('.').rglob('*.py')]\""
)
# Passes in story worktrees; on the epic branch it refuses the flaky story's module (after a pause,
# so a kill can land between the merge and its rollback).
# The epic's gates run in the merge train's candidates, each named `_epic` like the epic worktree
# (docs/merging.md), never in a story worktree (named after its story).
POLICY_GATE = (
    'sh -c \'if [ "$(basename "$(pwd)")" = _epic ] && [ -f src/flaky.py ]; '
    "then sleep 0.4; echo flaky.py is not allowed on the epic; exit 1; fi'"
)


@dataclass(frozen=True)
class Shape:
    """How the merge train is driven (the defaults: as the campaign always ran). `epic_sleep`
    makes every epic gate run take that long, `delays` holds stories' coder turns back (ms), so
    stories queue up behind a candidate and are batched; `settings` are added to the config."""

    epic_sleep: float = 0.0
    delays: tuple[tuple[str, int], ...] = ()
    settings: str = ""

    def gate(self) -> str:
        if not self.epic_sleep:
            return POLICY_GATE
        return POLICY_GATE.replace(
            "sh -c '", f'sh -c \'[ "$(basename "$(pwd)")" = _epic ] && sleep {self.epic_sleep:g}; ', 1
        )


# (id, owned, depends, tasks): each task writes one file of the story's own.
STORIES: list[tuple[str, str, list[str], int]] = [
    ("core", "src/core/", [], 2),
    ("flaky", "src/flaky.py", ["core"], 1),
    ("models", "src/models/", ["core"], 2),
    ("docs", "docs/", [], 1),
    ("api", "src/api/", ["models"], 2),
    ("cli", "src/cli/", ["core"], 1),
    ("extras", "src/extras/", ["flaky"], 1),
    ("ui", "src/ui/", ["api"], 1),
    ("conf", "conf/", [], 1),
    ("checks", "checks/", ["api", "cli"], 2),
]

# A moment: the runner's JSON event that triggers the kill.
MOMENTS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "planning": lambda e: e["type"] == "StageStarted" and str(e.get("stage", "")).endswith("plan tasks"),
    "coder turn": lambda e: e["type"] == "TaskStarted",
    "gate": lambda e: e["type"] == "GateResult" and e.get("where") == "task",
    "merge": lambda e: e["type"] == "StageStarted" and str(e.get("stage", "")).endswith(": merge"),
    "after merge": lambda e: e["type"] == "StoryMerged",
    "rollback": lambda e: e["type"] == "GateResult" and e.get("where") == "epic" and e.get("ok") is False,
    # The merge train (docs/merging.md): a candidate being built and gated, a bisection under way.
    "mid batch": lambda e: e["type"] == "MergeBatchStarted",
    "mid bisect": lambda e: e["type"] == "MergeBisect" and not e.get("culprit"),
    "report": lambda e: e["type"] == "RunEnded",
}


def _file(owned: str, n: int) -> str:
    return owned if not owned.endswith("/") else f"{owned}part{n}.py"


def build(root: Path, size: int, shape: Shape = Shape()) -> Scenario:
    chosen = STORIES[:size]
    ids = {sid for sid, *_ in chosen}
    stories = [story(sid, [owned], [d for d in deps if d in ids]) for sid, owned, deps, _ in chosen]
    rules: list[dict[str, Any]] = []
    for sid, owned, _, tasks in chosen:
        plan = {
            "tasks": [
                {"title": f"{sid} part {n}", "description": f"Write part {n}."} for n in range(1, tasks + 1)
            ]
        }
        rules.append({"when": {"role": "planner", "story": sid}, "reply": json.dumps(plan)})
        for n in range(1, tasks + 1):
            path = _file(owned, n)
            content = f"# {sid} part {n}\nVALUE_{n} = {n}\n" if path.endswith(".py") else f"{sid} {n}\n"
            rules.append(
                {"when": {"role": "coder", "story": sid, "task": f"part {n}$"}, "writes": {path: content},
                 "reply": f"{sid} part {n} written", "usage": {"input": 900, "output": 120, "costUsd": 0.001},
                 **({"delayMs": dict(shape.delays)[sid]} if sid in dict(shape.delays) else {})}
            )  # fmt: skip
    settings = (
        f"gates = [{json.dumps(PARSE_GATE)}, {json.dumps(shape.gate())}]\n"
        "concurrency = 3\njudgeRounds = 1\nmaxReviewRounds = 1\n"
        # The campaign is about kills around merges: story `flaky` fails at its first red merge, as
        # it always did (docs/revisions.md: no merge revision, no gate rerun).
        "mergeRevisionRounds = 0\ngateRetries = 0\n" + shape.settings
    )
    return Scenario.create(root, stories, rules, settings=settings, epic_id=EPIC)


def env_for(root: Path) -> dict[str, str]:
    return {**os.environ, "FLOWD_SCRIPT_STATE": str(root / "script-state")}


@dataclass
class Attempt:
    exit_code: int | None  # None: killed
    moment: str | None
    events: int


class Runner:
    """One `flowd run --json` in its own process group, its stdout read on a thread."""

    def __init__(self, sc: Scenario, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*FLOWD, "run", str(sc.plan_path), "--json"],
            cwd=sc.repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.seen_lines: list[str] = []  # what `until` read, for the sentence of a timeout
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def until(self, predicate: Callable[[dict[str, Any]], bool], count: int, timeout: float) -> int:
        """Read events until the `count`-th match (returns events read) or the end (returns -1)."""
        seen = matched = 0
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no end and no moment in {timeout:g}s; {self.stuck()}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                return -1
            self.seen_lines.append(line.decode("utf-8", "replace"))
            seen += 1
            try:
                event = json.loads(line)["event"]
            except (ValueError, KeyError, TypeError):
                continue
            if predicate(event):
                matched += 1
                if matched >= count:
                    return seen

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=30)

    def stuck(self) -> str:
        """What a run that stopped moving was doing: its last events and its tasks' stacks (it
        prints them on SIGUSR1, docs/reliability.md)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGUSR1)
        time.sleep(2)
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        time.sleep(0.5)  # the stderr reader's last read
        events = "".join(self.seen_lines[-6:])
        return f"its last events:\n{events}\nits stderr:\n{self.stderr.decode('utf-8', 'replace')[-12000:]}"

    def finish(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


def processes_under(root: Path) -> list[int]:
    """Live processes (ours) whose working directory is inside `root`: agents, gates, git."""
    found = []
    me = os.getuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != me:
                continue
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == str(root) or cwd.startswith(str(root) + os.sep)):
            found.append(int(entry.name))
    return found


def reap_leftovers(root: Path, grace_s: float = 10.0) -> list[int]:
    """Wait for processes left under `root` to end by themselves; kill (and return) those that do not."""
    deadline = time.monotonic() + grace_s
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


# -- the checks -------------------------------------------------------------------------------


@dataclass
class Snapshot:
    tree: dict[str, str]
    merges: list[str]
    worktrees: list[str]
    branches: list[str]
    exit_code: int


def snapshot(sc: Scenario, exit_code: int) -> Snapshot:
    tree = {}
    for line in git(sc.repo, "ls-tree", "-r", f"epic/{EPIC}").splitlines():
        meta, path = line.split("\t", 1)
        tree[path] = meta.split()[2]
    merges = [
        s for s in git(sc.repo, "log", "--format=%s", f"epic/{EPIC}").splitlines() if ": merge story " in s
    ]
    worktrees = []
    for line in git(sc.repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
            worktrees.append("." if path == sc.repo else str(path.relative_to(sc.worktree_root)))
    branches = git(sc.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
    return Snapshot(tree, sorted(merges), sorted(worktrees), sorted(branches), exit_code)


def check(sc: Scenario, final: Snapshot, reference: Snapshot) -> dict[str, str | None]:
    """Each check's failure (None: passed)."""
    out: dict[str, str | None] = {}
    diff = sorted(set(final.tree.items()) ^ set(reference.tree.items()))
    out["epic tree equals the uninterrupted run's"] = (
        f"differs at {sorted({p for p, _ in diff})}" if diff else None
    )
    doubled = sorted({m for m in final.merges if final.merges.count(m) > 1})
    missing = ""
    if final.merges != reference.merges:
        report = sc.repo / ".flow" / "epics" / EPIC / "report.json"
        try:
            stories = json.loads(report.read_text(encoding="utf-8"))["stories"]
            wanted = {m.rsplit(" ", 1)[1] for m in set(reference.merges) - set(final.merges)}
            missing = "; " + "; ".join(
                f"{s['id']}: {s.get('status')} ({str(s.get('reason') or s.get('note'))[:300]})"
                for s in stories
                if s["id"] in wanted
            )
        except (OSError, ValueError, KeyError):
            missing = "; (no readable report)"
    out["every story merged exactly once"] = (
        f"merged twice: {doubled}"
        if doubled
        else (
            f"merges {final.merges} != {reference.merges}{missing}"
            if final.merges != reference.merges
            else None
        )
    )
    on_disk = sorted(
        str(p.relative_to(sc.worktree_root)) for p in sc.worktree_root.glob(f"{EPIC}/*") if p.is_dir()
    )
    registered = [w for w in final.worktrees if w != "."]
    out["no orphan worktree or branch"] = (
        f"worktrees {final.worktrees} != {reference.worktrees}"
        if final.worktrees != reference.worktrees
        else f"branches {final.branches} != {reference.branches}"
        if final.branches != reference.branches
        else f"stray directories {sorted(set(on_disk) - set(registered))}"
        if set(on_disk) != set(registered)
        else None
    )
    bad = []
    for path in (sc.repo / ".flow").rglob("*.json"):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            bad.append(f"{path.relative_to(sc.repo)} ({exc})")
    lock = sc.repo / ".flow" / "epics" / EPIC / "lock"
    out["no corrupt state file, no lock left"] = (
        f"unreadable: {bad}" if bad else ("lock left behind" if lock.exists() else None)
    )
    runs = list_runs(sc.repo)
    held = []
    if runs:
        last = runs[0]
        view = fold(last.run_id, read_trace(trace_path(sc.repo, last.run_id)))
        held = [c.name for c in view.clones.values() if c.held]
    roster_state = sc.repo / ".flow" / "roster-state.json"
    excluded: Any = None
    if roster_state.exists():
        data = json.loads(roster_state.read_text(encoding="utf-8"))
        excluded = data.get("exclusions") or None
    out["no clone held, roster state sane"] = (
        f"held after the run: {held}" if held else (f"exclusions left: {excluded}" if excluded else None)
    )
    out["exit code equals the uninterrupted run's"] = (
        f"{final.exit_code} != {reference.exit_code}" if final.exit_code != reference.exit_code else None
    )
    return out


# -- the campaign -----------------------------------------------------------------------------


@dataclass
class Report:
    kills_tried: int = 0
    kills_survived: int = 0
    rounds: int = 0
    runs: int = 0
    moments: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    leftovers: int = 0
    not_reached: int = 0  # planned moments a run ended before reaching
    checks: dict[str, int] = field(default_factory=dict)  # check → rounds passed
    seconds: float = 0.0
    reference_seconds: float = 0.0


def reference_run(root: Path, size: int, timeout: float, shape: Shape = Shape()) -> Snapshot:
    sc = build(root / "reference", size, shape)
    env = env_for(root / "reference")
    runner = Runner(sc, env)
    code = runner.finish(timeout)
    reap_leftovers(root / "reference", grace_s=5)
    return snapshot(sc, code)


def campaign(
    root: Path,
    *,
    size: int,
    kills: int,
    seed: int,
    moments: list[str] | None = None,
    timeout: float = 180.0,
    log: Callable[[str], None] = lambda _: None,
    shape: Shape = Shape(),
) -> Report:
    """`kills` seeded kills (or exactly `moments`, in order); every round checked against the reference."""
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    reference = reference_run(root, size, timeout, shape)
    report.reference_seconds = time.monotonic() - started
    log(f"reference: exit {reference.exit_code}, {len(reference.merges)} merges, {len(reference.tree)} files")
    planned = list(moments) if moments is not None else [rng.choice(sorted(MOMENTS)) for _ in range(kills)]
    while planned:
        report.rounds += 1
        where = root / f"round{report.rounds}"
        sc = build(where, size, shape)
        env = env_for(where)
        round_kills = 0
        while True:
            runner = Runner(sc, env)
            report.runs += 1
            moment = planned[0] if planned else None
            try:
                if moment is None:
                    code: int | None = runner.finish(timeout)
                else:
                    # Chosen moments (a test) come at their first occurrence; seeded ones at a random one.
                    count = (
                        1
                        if moments is not None or moment in ("rollback", "report", "mid bisect")
                        else rng.randint(1, 3)
                    )
                    seen = runner.until(MOMENTS[moment], count, timeout)
                    if seen < 0:
                        code = runner.finish(timeout)
                    else:
                        runner.kill()
                        code = None
                        planned.pop(0)
                        round_kills += 1
                        report.kills_tried += 1
                        report.moments[moment] = report.moments.get(moment, 0) + 1
                        log(f"round {report.rounds}: killed at {moment} #{count} after {seen} events")
            finally:
                runner.kill()
            left = reap_leftovers(where)
            if left:
                report.leftovers += len(left)
                report.failures.append(f"round {report.rounds}: {len(left)} process(es) outlived the runner")
            if code is None:
                continue
            if code == 2:
                report.failures.append(
                    f"round {report.rounds}: rerun refused: {runner.stderr.decode()[-400:]}"
                )
                break
            if moment is not None:
                # The run ended before the moment came (this run had fewer of them): not a kill.
                planned.pop(0)
                report.not_reached += 1
            break
        final = snapshot(sc, code if code is not None else -1)
        results = check(sc, final, reference)
        for name, problem in results.items():
            if problem is None:
                report.checks[name] = report.checks.get(name, 0) + 1
            else:
                report.failures.append(f"round {report.rounds}: {name}: {problem}")
        if all(p is None for p in results.values()) and not any(
            f.startswith(f"round {report.rounds}:") for f in report.failures
        ):
            report.kills_survived += round_kills
        log(
            f"round {report.rounds}: {round_kills} kill(s), checks {'ok' if all(p is None for p in results.values()) else results}"
        )
    report.seconds = time.monotonic() - started
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--stories", type=int, default=10, choices=range(3, len(STORIES) + 1))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir and print it")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flowd-kill-"))
    try:
        report = campaign(
            tmp, size=args.stories, kills=args.kills, seed=args.seed, log=lambda m: print(m, flush=True)
        )
    finally:
        reap_leftovers(tmp, grace_s=2)
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"epic: {args.stories} stories, seed {args.seed}")
    print(f"kills survived / kills tried: {report.kills_survived}/{report.kills_tried}")
    print(f"rounds: {report.rounds}, runs: {report.runs}, {report.seconds:.0f}s "
          f"(one uninterrupted run: {report.reference_seconds:.0f}s)")  # fmt: skip
    print("kills by moment: " + ", ".join(f"{k} {v}" for k, v in sorted(report.moments.items())))
    print(f"planned moments a run ended before reaching (no kill): {report.not_reached}")
    for name, passed in report.checks.items():
        print(f"  {name}: {passed}/{report.rounds} rounds")
    print(f"processes that outlived their runner: {report.leftovers}")
    for failure in report.failures:
        print(f"FAIL {failure}")
    return 0 if not report.failures and report.kills_survived == report.kills_tried else 1


if __name__ == "__main__":
    sys.exit(main())
