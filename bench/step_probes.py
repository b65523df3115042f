"""Where a lane's time goes between its agent turns: timers around flowd's steps, for the benches
that run an epic in this process (`bench/throughput.py --profile`, `bench/merge_train.py
--profile`). Not a bench of its own (`make bench` runs it and it only says so).

`install()` wraps a fixed list of flowd's functions (agent process start and stop, session open,
each turn by role, leases, gates, the quarantine take-in, detection's checks, the worktree, catch-up,
merge, commit, diff...) so each call records its wall interval and the story it was for (from its
arguments: a `lane`/`label`, a worktree path, a request's story). `table()` then sums, for the
stories of a chain, the part of each interval that falls in the story's time outside its coder
turn: launch excluded, from `active` to its merge. Probes nest (a turn contains its agent start; a
gate's step contains its take-ins and detection), so the rows do not add up; the last row is the
time no probe covered (the event loop, thread hops, waits for the merge lock, scheduling).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (row, module, class or None, function); rows print in this order.
PROBES: list[tuple[str, str, str | None, str]] = [
    ("lease (incl. wait)", "flowd.roster.pool", "RosterPool", "lease"),
    ("turn", "flowd.agents.acp_client", "AcpExecutor", "run_turn"),
    ("  agent start", "flowd.agents.acp_process", "AgentProcess", "_start"),
    ("  agent stop", "flowd.agents.acp_process", "AgentProcess", "stop"),
    ("  session open", "flowd.agents.acp_client", "AcpExecutor", "_open_session"),
    ("gates (step)", "flowd.engine.context", "RunContext", "gates"),
    ("  gate process", "flowd.engine.gates", None, "run_command"),
    ("take-in", "flowd.engine.lane_objects", "LaneObjects", "take"),
    ("detect: git dir", "flowd.engine.detect", "Detector", "check_git_dir"),
    ("detect: worktree", "flowd.engine.detect", "Detector", "check_lane_worktree"),
    ("detect: strays", "flowd.engine.detect", "Detector", "_kill_strays"),
    ("detect: shared+secrets", "flowd.engine.detect", "Detector", "_after_step"),
    ("  shared: trace", "flowd.engine.detect", "Detector", "_check_trace"),
    ("  shared: files", "flowd.engine.detect", "Detector", "_check_files"),
    ("  shared: refs", "flowd.engine.detect", "Detector", "_check_refs"),
    ("  shared: story refs", "flowd.engine.detect", "Detector", "_check_story_refs"),
    ("  shared: home", "flowd.engine.detect", "Detector", "_check_home"),
    ("  lane status", "flowd.engine.detect", "Detector", "snapshot"),
    ("  secrets", "flowd.engine.detect", "Detector", "_check_secrets"),
    ("detect: epic worktree", "flowd.engine.detect", "Detector", "check_epic_worktree"),
    ("worktree", "flowd.engine.story", None, "prepare"),
    ("check out", "flowd.engine.story", None, "check_out"),
    ("catch-up", "flowd.engine.story", None, "catch_up"),
    ("perimeter", "flowd.engine.taskbody", None, "perimeter_now"),
    ("repair perimeter", "flowd.engine.story", None, "repair_perimeter"),
    ("merge (incl. train)", "flowd.engine.story", None, "merge"),
    ("  detect: seen", "flowd.engine.detect", "Detector", "seen"),
    ("  train: epic changes", "flowd.engine.train", "TrainShell", "_epic_changes"),
    ("  train: build", "flowd.engine.train", "TrainShell", "_merge_all"),
    ("  train: check slot", "flowd.engine.train", "TrainShell", "_check_slot"),
    ("  train: gates", "flowd.engine.train", "TrainShell", "_gates_here"),
    ("  train: land", "flowd.engine.train", "TrainShell", "_land"),
    ("detect: checkout scan", "flowd.engine.detect", "Detector", "check_checkout"),
    ("leave lane (after merge)", "flowd.roster.pool", "RosterPool", "leave_lane"),
    ("clean up (after merge)", "flowd.engine.story", None, "clean_up_at"),
    ("commit", "flowd.vcs.gitops", "Repo", "commit_all"),
    ("diff", "flowd.vcs.gitops", "Repo", "diff"),
    ("head", "flowd.vcs.gitops", "Repo", "head_of"),
    ("status", "flowd.vcs.gitops", "Repo", "status_paths"),
]
# Rows whose union is "covered": the outermost probes of a lane's steps.
TOP = ("lease (incl. wait)", "turn", "gates (step)", "take-in", "detect: git dir", "detect: worktree",
       "detect: strays", "detect: shared+secrets", "worktree", "check out", "catch-up", "perimeter",
       "repair perimeter", "merge (incl. train)", "leave lane (after merge)", "clean up (after merge)", "commit", "diff", "head", "status")  # fmt: skip

_STORY = re.compile(r"/(s\d\d+)(?:[/@.]|$)")


@dataclass(frozen=True)
class Call:
    row: str
    lane: str | None
    start: float
    end: float
    role: str | None = None


CALLS: list[Call] = []
_lock = threading.Lock()


def _lane_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the story a call was for, the turn's role) from its arguments, as well as can be told."""
    role = None
    for key in ("lane", "label"):
        if isinstance(kwargs.get(key), str):
            return kwargs[key], None
    values = [*args, *kwargs.values()]
    for value in values:
        meta = getattr(value, "meta", None)
        if meta is not None and hasattr(meta, "story"):
            return meta.story, getattr(value, "role", None)
        story = getattr(value, "story", None)
        if story is not None and isinstance(getattr(story, "id", None), str):
            return story.id, None
        if isinstance(value, str) and re.fullmatch(r"s\d\d+", value):
            return value, None
        if isinstance(value, Path | str) and (found := _STORY.search(str(value))):
            return found.group(1), None
        lanes = getattr(value, "lanes", value)  # a train step's stories: the first one's
        if (
            isinstance(lanes, list | tuple)
            and lanes
            and isinstance(lanes[0], str)
            and re.fullmatch(r"s\d\d+", lanes[0])
        ):
            return lanes[0], None
    for value in values:  # a process being stopped: the lane it was confined to
        confined = getattr(value, "confined_to", None)
        if isinstance(confined, str) and (found := _STORY.search(confined)):
            return found.group(1), None
    return None, role


_here = threading.local()  # the lane of the sync probe this thread is inside (nested probes)


def _record(row: str, args: tuple[Any, ...], kwargs: dict[str, Any], start: float) -> None:
    lane, role = _lane_of(args, kwargs)
    lane = lane or getattr(_here, "lane", None)
    if row == "turn" and role:
        row = f"turn: {role}"
    with _lock:
        CALLS.append(Call(row, lane, start, time.time(), role))


def _wrap(row: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return await fn(*args, **kwargs)
            finally:
                _record(row, args, kwargs, start)

        return timed_async

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        outer = getattr(_here, "lane", None)
        _here.lane = _lane_of(args, kwargs)[0] or outer
        try:
            return fn(*args, **kwargs)
        finally:
            _here.lane = outer
            _record(row, args, kwargs, start)

    return timed


def install() -> None:
    """Wrap every probe's function (once)."""
    for row, module_name, cls_name, name in PROBES:
        module = importlib.import_module(module_name)
        owner = getattr(module, cls_name) if cls_name else module
        fn = getattr(owner, name)
        if getattr(fn, "_probed", False):
            continue
        wrapped = _wrap(row, fn)
        wrapped._probed = True  # type: ignore[attr-defined]
        setattr(owner, name, wrapped)


def _clip(start: float, end: float, windows: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in windows)


def _union(spans: list[tuple[float, float]]) -> float:
    total, last = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= last:
            continue
        total += b - max(a, last)
        last = b
    return total


def table(windows: dict[str, list[tuple[float, float]]], title: str) -> None:
    """Per probe: calls per story, median ms per call, and ms per story inside `windows` (story →
    its between-turn intervals, epoch seconds), averaged over those stories."""
    stories = list(windows)
    if not stories:
        return
    n = len(stories)
    rows: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    spans: dict[str, list[tuple[float, float]]] = {s: [] for s in stories}
    for call in CALLS:
        if call.lane not in windows:
            continue
        inside = _clip(call.start, call.end, windows[call.lane])
        if inside <= 0.0:
            continue
        rows.setdefault(call.row, []).append(call.end - call.start)
        counts[call.row] = counts.get(call.row, 0) + 1
        rows.setdefault(f"{call.row}\0in", []).append(inside)
        if call.row.startswith("turn") or call.row in TOP:
            spans[call.lane].append((max(call.start, min(a for a, _ in windows[call.lane])), call.end))
    total = sum(b - a for s in stories for a, b in windows[s]) / n
    print(
        f"{title}: {n} stories, {total * 1000:.0f} ms each between their turns (median ms per call; ms per story)"
    )
    print(f"  {'step':<24} {'calls/story':>11} {'ms/call':>8} {'ms/story':>9}")
    order = [r for r, *_ in PROBES]
    order[1:2] = sorted({c.row for c in CALLS if c.row.startswith("turn")})
    for row in order:
        if row not in rows:
            continue
        per_call = statistics.median(rows[row]) * 1000
        per_story = sum(rows[f"{row}\0in"]) / n * 1000
        print(f"  {row:<24} {counts[row] / n:>11.1f} {per_call:>8.1f} {per_story:>9.1f}")
    covered = sum(
        _union([(max(a, w0), min(b, w1)) for a, b in spans[s] for w0, w1 in windows[s] if min(b, w1) > max(a, w0)])
        for s in stories
    ) / n  # fmt: skip
    print(f"  {'(no probe: loop, locks, hops)':<24} {'':>11} {'':>8} {(total - covered) * 1000:>9.1f}")


if __name__ == "__main__":
    print("bench/step_probes.py is the probes of `bench/throughput.py --profile`; nothing to run alone")
