"""Usage samples: one `Sample` per `TokensUsed` line of the repository's traces.

The reader is built for volume (a busy repository holds millions of trace lines): it looks for
the `"TokensUsed"` marker in the raw bytes before parsing anything, parses only those lines
(`flowd.base.jsonl`), and builds samples from the dicts tolerantly instead of validating each line with pydantic.
Files and lines it cannot read are skipped and counted in `ScanStats`, never fatal.
`flowd cost` itself reads with `flowd.cost.aggregate`, which sums lines by group and falls back to
`sample_from_dict` for the lines it cannot sum; `scan` is the per-sample reference it must equal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowd.base.jsonl import JSONError, loads
from flowd.base.timeutil import iso, parse_iso
from flowd.store.config import flow_dir

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

_TOKENS_MARK = b'"TokensUsed"'
_STARTED_MARK = b'"RunStarted"'
_FLOAT_MAX = 1 << 1023  # the integers below this convert to a float without overflow
UNKNOWN_MODEL = "(unknown)"


@dataclass(slots=True)
class Sample:
    """One turn's usage as the trace recorded it. `input` includes cache reads and writes."""

    run_id: str
    at: str  # ISO-8601 UTC with milliseconds and `Z` (normalised at read time)
    agent: str
    input: int = 0
    output: int = 0
    cached_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None  # what the agent reported; wins over the price data
    estimated: bool = False
    model: str | None = None
    lane: str | None = None
    executor: str | None = None
    clone: int | None = None

    @property
    def total(self) -> int:
        return self.input + self.output


@dataclass
class ScanStats:
    """What a scan met besides samples: skipped files and lines, and each run's budget."""

    files: int = 0
    skipped_files: int = 0
    skipped_lines: int = 0
    problems: list[str] = field(default_factory=list)
    budgets: dict[str, float] = field(default_factory=dict)  # runId → RunStarted.budgetUsd
    epics: dict[str, str] = field(default_factory=dict)  # runId → epicId


def _canonical_at(value: object) -> str | None:
    """The time as `YYYY-MM-DDTHH:MM:SS.mmmZ`; writers already use it, others are converted."""
    if not isinstance(value, str):
        return None
    if len(value) == 24 and value[10] == "T" and value[23] == "Z":
        return value
    try:
        return iso(parse_iso(value))
    except ValueError:
        return None


def _count(value: object) -> int | None:
    """A token count: a non-negative int (a float from a sloppy writer is truncated); None if absent."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value >= 0 and value == value:
        return int(value)
    return None


def sample_from_dict(raw: Any, run_hint: str = "") -> Sample | None:
    """A sample from one parsed trace line, or None when it is not a usable TokensUsed line."""
    # Written for speed (it runs once per usage line): plain lookups and exact type checks on the
    # common shape, with the tolerant conversions only when a field is odd.
    if type(raw) is not dict:
        return None
    event = raw.get("event")
    if type(event) is not dict or event.get("type") != "TokensUsed":
        return None
    usage = event.get("usage")
    at = raw.get("at")
    if type(at) is not str or len(at) != 24 or at[23] != "Z" or at[10] != "T":
        at = _canonical_at(at)
    agent = event.get("agent")
    if type(usage) is not dict or at is None or type(agent) is not str:
        return None
    run_id = raw.get("runId")
    if type(run_id) is not str or not run_id:
        run_id = run_hint
    input_ = usage.get("input", 0)
    output = usage.get("output", 0)
    cached_read = usage.get("cachedRead") or 0
    cache_write = usage.get("cacheWrite") or 0
    if not (
        type(input_) is int
        and type(output) is int
        and type(cached_read) is int
        and type(cache_write) is int
        and input_ >= 0
        and output >= 0
        and cached_read >= 0
        and cache_write >= 0
    ):
        counts = [_count(v) for v in (input_, output, cached_read, cache_write)]
        if any(c is None for c in counts):
            return None
        input_, output, cached_read, cache_write = (c or 0 for c in counts)
    cost = usage.get("costUsd")
    if cost is not None:
        if type(cost) is int:
            if not -_FLOAT_MAX <= cost <= _FLOAT_MAX:
                return None  # an integer no float holds (JSON integers are read exactly)
            cost = float(cost)
        elif type(cost) is not float:
            return None
        if not cost >= 0:
            return None
    model = event.get("model")
    lane = event.get("lane")
    executor = event.get("executor")
    clone = event.get("clone")
    return Sample(
        run_id,
        at,
        agent,
        input_,
        output,
        cached_read,
        cache_write,
        cost,
        event.get("estimated") is True,
        model if type(model) is str and model else None,
        lane if type(lane) is str and lane else None,
        executor if type(executor) is str and executor else None,
        clone if type(clone) is int else None,
    )


def read_samples(path: Path, stats: ScanStats, run_hint: str = "") -> Iterator[Sample]:
    """The samples of one trace file, in file order; problems are counted in `stats`."""
    stats.files += 1
    try:
        handle = path.open("rb")
    except OSError as exc:
        stats.skipped_files += 1
        stats.problems.append(f"skipped {path}: {exc.strerror or exc}")
        log.warning("cost: skipped %s: %s", path, exc)
        return
    with handle:
        try:
            for line in handle:
                if _TOKENS_MARK in line:
                    try:
                        raw = loads(line)
                    except JSONError:
                        stats.skipped_lines += 1
                        continue
                    sample = sample_from_dict(raw, run_hint)
                    if sample is None:
                        stats.skipped_lines += 1
                    else:
                        yield sample
                elif _STARTED_MARK in line:
                    note_run_started(line, stats)
        except OSError as exc:  # e.g. EISDIR on the first read, or an I/O error mid-file
            stats.skipped_files += 1
            stats.problems.append(f"skipped {path}: {exc.strerror or exc}")
            log.warning("cost: skipped %s: %s", path, exc)


def note_run_started(line: bytes, stats: ScanStats) -> None:
    try:
        raw = loads(line)
    except JSONError:
        return
    if not isinstance(raw, dict) or not isinstance(raw.get("event"), dict):
        return
    event, run_id = raw["event"], raw.get("runId")
    if event.get("type") != "RunStarted" or not isinstance(run_id, str):
        return
    budget = event.get("budgetUsd")
    if isinstance(budget, int | float) and not isinstance(budget, bool) and budget > 0:
        stats.budgets[run_id] = float(budget)
    epic = event.get("epicId")
    if isinstance(epic, str):
        stats.epics[run_id] = epic


def runs_dir(repo: Path) -> Path:
    """`flowd.trace.log.runs_dir`, without importing the trace machinery (and the engine's models)
    into `flowd cost` (docs/performance.md: cost)."""
    return flow_dir(repo) / "runs"


def trace_files(repo: Path, run_id: str | None = None) -> list[tuple[str, Path]]:
    """(runId, trace path) of every run directory of the repository, in name order."""
    base = runs_dir(repo)
    if run_id is not None:
        path = base / run_id / "trace.jsonl"
        return [(run_id, path)] if path.exists() or path.is_symlink() else []
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    return [(d.name, d / "trace.jsonl") for d in entries if d.is_dir() and (d / "trace.jsonl").exists()]


def scan(files: Iterable[tuple[str, Path]], stats: ScanStats, run_id: str | None = None) -> Iterator[Sample]:
    """The samples of many traces, one after another (streaming: nothing is kept)."""
    for hint, path in files:
        for sample in read_samples(path, stats, hint):
            if run_id is None or sample.run_id == run_id:
                yield sample
