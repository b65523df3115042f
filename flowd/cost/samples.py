"""Usage samples: one `Sample` per `TokensUsed` line of the repository's traces.

The reader is built for volume (a busy repository holds millions of trace lines): it looks for
the `"TokensUsed"` marker in the raw bytes before parsing anything, parses only those lines with
orjson, and builds samples from the dicts tolerantly instead of validating each line with pydantic.
Files and lines it cannot read are skipped and counted in `ScanStats`, never fatal.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from flowd.events import TokensUsed
from flowd.timeutil import iso, parse_iso
from flowd.trace import runs_dir

log = logging.getLogger(__name__)

_TOKENS_MARK = b'"TokensUsed"'
_STARTED_MARK = b'"RunStarted"'
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

    @classmethod
    def from_event(cls, event: TokensUsed, *, run_id: str = "", at: str = "") -> Sample:
        usage = event.usage
        return cls(
            run_id=run_id,
            at=at,
            agent=event.agent,
            input=usage.input,
            output=usage.output,
            cached_read=usage.cached_read or 0,
            cache_write=usage.cache_write or 0,
            cost_usd=usage.cost_usd,
            estimated=event.estimated,
            model=event.model,
            lane=event.lane,
            executor=event.executor,
            clone=event.clone,
        )


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


# A `TokensUsed` line exactly as `TraceWriter` writes it (fields in model order, `None`s left out,
# strings without escapes or control characters): one scan of a chunk reads every field of every
# such line, and the values are what `sample_from_dict(orjson.loads(line))` would take from it.
_STR = r'"([^"\\\x00-\x1f]*)"'
_NUM = r"(0|[1-9][0-9]{0,17})"
_CANONICAL = re.compile(
    r'\n\{"v":1,"seq":[0-9]+,"at":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)",'
    rf'"runId":{_STR},"event":\{{"type":"TokensUsed"(?:,"lane":{_STR})?(?:,"executor":{_STR})?'
    rf'(?:,"clone":(0|-?[1-9][0-9]{{0,17}}))?,"agent":{_STR}(?:,"model":{_STR})?,'
    rf'"usage":\{{"input":{_NUM},"output":{_NUM},"total":-?[0-9]{{1,19}}(?:,"cachedRead":{_NUM})?'
    rf'(?:,"cacheWrite":{_NUM})?(?:,"costUsd":((?:0|[1-9][0-9]{{0,17}})(?:\.[0-9]{{1,20}})?'
    r'(?:[eE][+-]?[0-9]{1,2})?))?\},"estimated":(true|false)\}\}$',
    re.MULTILINE,  # `$` only: each match starts at the newline before its line (a literal
)  # prefix the scan finds fast), so the chunk is scanned with one newline in front
_CHUNK = 4 << 20


def read_samples(path: Path, stats: ScanStats, run_hint: str = "") -> Iterator[Sample]:
    """The samples of one trace file, in file order; problems are counted in `stats`.

    Read in chunks of whole lines (docs/performance.md: cost): when every `TokensUsed` line of a
    chunk has the writer's own shape, one regular-expression scan turns the chunk into samples;
    otherwise (another writer's spacing, odd values, a torn line) each line of the chunk is parsed
    on its own. Both give the same samples and the same counts of skipped lines."""
    stats.files += 1
    try:
        handle = path.open("rb")
    except OSError as exc:
        stats.skipped_files += 1
        stats.problems.append(f"skipped {path}: {exc.strerror or exc}")
        log.warning("cost: skipped %s: %s", path, exc)
        return
    with handle:
        pending = b""
        try:
            while block := handle.read(_CHUNK):
                data = pending + block if pending else block
                cut = data.rfind(b"\n") + 1
                pending = data[cut:]
                if cut:
                    yield from _read_chunk(data[:cut] if pending else data, stats, run_hint)
            if pending:
                yield from _read_lines(pending.splitlines(keepends=True), stats, run_hint)
        except OSError as exc:  # e.g. EISDIR on the first read, or an I/O error mid-file
            stats.skipped_files += 1
            stats.problems.append(f"skipped {path}: {exc.strerror or exc}")
            log.warning("cost: skipped %s: %s", path, exc)


def _read_chunk(chunk: bytes, stats: ScanStats, run_hint: str) -> Iterator[Sample]:
    marks = chunk.count(_TOKENS_MARK)
    if marks:
        try:
            text = chunk.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        found = _CANONICAL.findall("\n" + text) if text else []
        # A writer's line holds the mark once (no string of it can hold a quote), so as many
        # matches as marks means no other line of the chunk is a usage line.
        if len(found) != marks:
            yield from _read_lines(chunk.splitlines(keepends=True), stats, run_hint)
            return
        yield from _canonical_samples(found, run_hint)
    if _STARTED_MARK in chunk:
        for line in chunk.splitlines():
            if _STARTED_MARK in line and _TOKENS_MARK not in line:
                _note_run_started(line, stats)


def _canonical_samples(found: list[tuple[str, ...]], run_hint: str) -> Iterator[Sample]:
    for at, run_id, lane, executor, clone, agent, model, inp, out, read, write, cost, est in found:
        yield Sample(
            run_id or run_hint,
            at,
            agent,
            int(inp),
            int(out),
            int(read) if read else 0,
            int(write) if write else 0,
            float(cost) if cost else None,
            est == "true",
            model or None,
            lane or None,
            executor or None,
            int(clone) if clone else None,
        )


def _read_lines(lines: Iterable[bytes], stats: ScanStats, run_hint: str) -> Iterator[Sample]:
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    for line in lines:
        if _TOKENS_MARK in line:
            try:
                raw = loads(line)
            except decode_error:
                stats.skipped_lines += 1
                continue
            sample = sample_from_dict(raw, run_hint)
            if sample is None:
                stats.skipped_lines += 1
            else:
                yield sample
        elif _STARTED_MARK in line:
            _note_run_started(line, stats)


def _note_run_started(line: bytes, stats: ScanStats) -> None:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError:
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
