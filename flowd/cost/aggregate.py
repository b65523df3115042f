"""The cost report's reader for volume (docs/performance.md: cost): usage lines summed by group,
each group priced once.

A busy repository holds millions of `TokensUsed` lines, and building, pricing and bucketing one
sample per line costs more than reading it. So this reader:

- finds the usage lines by a bytes search for `"TokensUsed"` in 4 MB blocks
  (`flowd.base.jsonl.marked_lines`: no other line is split out or parsed) and decodes each with a msgspec decoder typed to the fields the report
  reads (strict: any odd value makes it refuse the line);
- sums the five token counts of the turns that share a group (UTC hour, run, model, estimated,
  agent, executor, clone, story, and whether the agent reported a cost) in a list of ints;
- at the end, or when `GROUP_CAP` groups are open, prices each group once from its sums and adds
  it to the report's two tables (`report.Folder.add_group`), bucketed by the group's local hour.

Pricing a group from its summed tokens equals summing its turns' prices where the price is
linear in the tokens, so a turn takes the exact per-sample path (`report.Folder.add`, the fold
`build_report` runs) wherever it is not, or where a group cannot stand for its turns: input above
the model's first price tier, more cache tokens than input (the uncached rest is clamped at 0), an
hour that straddles `--since`/`--until`, a line without its run id, a time not in the writer's
form, or a line the decoder refuses (`jsonl.loads` and `sample_from_dict` then decide, as before, whether
it is a usage line or a skipped one). A UTC hour that spans two local hours (a half-hour zone, a
change mid-hour) is split by local hour in the key. Costs are summed as integers
(`prices.UNITS_PER_USD`), so the sums are the same in any grouping and order.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Iterable
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from flowd.base.jsonl import JSONError, loads, marked_lines
from flowd.cost.fold import Folder, UsageFold, local_hour
from flowd.cost.prices import ExactRates, Prices, to_units
from flowd.cost.samples import ScanStats, note_run_started, sample_from_dict

log = logging.getLogger(__name__)

BLOCK = 4 << 20
# Open groups before they are priced into the tables: bounds memory when the variety is large.
GROUP_CAP = 20_000
_TOKENS_MARK = b'"TokensUsed"'
_STARTED_MARK = b'"RunStarted"'
# Distinct minutes remembered (`YYYY-MM-DDTHH:MM` → its group's time): bounds that cache's memory.
SLOT_CAP = 100_000
# A group's limit is the largest input its turns may have to be summed; these two send every turn
# to the exact path (SLOW) or drop them all (DROP: outside --since/--until, or another run).
SLOW = -1
DROP = -2

# Integers past 63 bits (JSON integers are read exactly, of any size) take the exact path.
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class _Usage(msgspec.Struct, gc=False, rename="camel"):
    input: _Count = 0
    output: _Count = 0
    cached_read: _Count = 0
    cache_write: _Count = 0
    cost_usd: Annotated[float, msgspec.Meta(ge=0)] | None = None


class _Event(msgspec.Struct, gc=False, rename="camel"):
    type: Literal["TokensUsed"]
    agent: str
    usage: _Usage
    lane: str | None = None
    executor: str | None = None
    clone: _Int | None = None
    model: str | None = None
    estimated: bool = False


class _Line(msgspec.Struct, gc=False, rename="camel"):
    at: str
    event: _Event
    run_id: str = ""


_DECODE = msgspec.json.Decoder(_Line).decode

# (slot: the UTC hour `YYYY-MM-DDTHH` (`_slot`), run, model, estimated, agent, executor, clone,
# story, no reported cost)
_Key = tuple[str, str, str | None, bool, str, str | None, int | None, str | None, bool]


class Aggregator:
    """Reads trace files into a `UsageFold` equal to `fold_usage` over their samples."""

    def __init__(
        self,
        prices: Prices,
        zone: tzinfo,
        since: str | None = None,
        until: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self._exact = Folder(prices, zone, since, until)
        self._prices, self._zone = prices, zone
        self._since, self._until, self._run_id = since, until, run_id
        # [requests, input, output, cachedRead, cacheWrite, limit, reported cost]
        self._groups: dict[_Key, list[Any]] = {}
        self._hours: dict[str, tuple[str, bool]] = {}  # UTC hour → (local hour, all its minutes in it)
        self._slots: dict[str, str] = {}  # minute → its slot: the UTC hour, or hour + local hour
        self._slot_hours: dict[str, tuple[str, str]] = {}  # slot → (UTC hour, local hour)
        self._limits: dict[tuple[str, str | None, bool], int | float] = {}
        self._exact_rates: dict[tuple[str | None, str], ExactRates | None] = {}
        self._first = "\x7f"  # summed turns' times start with a digit: any is below this
        self._last = ""

    def read(self, files: Iterable[tuple[str, Path]], stats: ScanStats) -> None:
        # The loop allocates a key tuple per usage line and keeps almost nothing: the cyclic
        # collector would run every few hundred lines and find no cycle (the groups hold ints and
        # strings), so it is paused while reading (docs/performance.md: cost).
        paused = gc.isenabled()
        gc.disable()
        try:
            for hint, path in files:
                self.read_file(path, stats, hint)
        finally:
            if paused:
                gc.enable()

    def fold(self) -> UsageFold:
        self._flush()
        if self._last:
            self._exact.span(self._first, self._last)
        return self._exact.fold()

    def read_file(self, path: Path, stats: ScanStats, hint: str = "") -> None:
        """One trace file, in blocks cut at line ends; problems are counted in `stats`."""
        stats.files += 1
        try:
            handle = path.open("rb")
        except OSError as exc:
            _skip_file(stats, path, exc)
            return
        with handle:
            try:
                tail = b""
                while block := handle.read(BLOCK):
                    end = block.rfind(b"\n") + 1
                    if not end:
                        tail += block
                        continue
                    begin = 0
                    if tail:  # the line cut by the last block, joined alone (not the whole block)
                        begin = block.find(b"\n") + 1
                        head = tail + block[:begin]
                        self._lines(head, 0, len(head), stats, hint)
                    self._lines(block, begin, end, stats, hint)
                    tail = block[end:]
                if tail:  # a last line without its newline (a run still writing, or torn)
                    self._lines(tail, 0, len(tail), stats, hint)
            except OSError as exc:  # e.g. EISDIR on the first read, or an I/O error mid-file
                _skip_file(stats, path, exc)

    def _lines(self, data: bytes, begin: int, end: int, stats: ScanStats, hint: str) -> None:
        """The usage lines of `data[begin:end]` (whole lines), summed into their groups."""
        self._run_started(data, begin, end, stats)
        # The loop body runs once per usage line: locals and builtins only; Python methods are
        # called on the rare paths (a new group or minute, a line for the exact path).
        # docs/performance.md: cost.
        decode, groups, slots = _DECODE, self._groups, self._slots
        first, last = self._first, self._last
        for line, _ in marked_lines(data, _TOKENS_MARK, begin, end):
            try:
                record = decode(line)
            except msgspec.MsgspecError:
                self._exactly(line, stats, hint)
                continue
            at = record.at
            if len(at) != 24 or at[23] != "Z":
                self._exactly(line, stats, hint)
                continue
            slot = slots.get(at[:16])
            if slot is None:
                slot = self._slot(at[:16])
            if not slot:
                self._exactly(line, stats, hint)
                continue
            event = record.event
            usage = event.usage
            cost = usage.cost_usd
            key = (
                slot,
                record.run_id,
                event.model,
                event.estimated,
                event.agent,
                event.executor,
                event.clone,
                event.lane,
                cost is None,
            )
            acc = groups.get(key)
            if acc is None:
                acc = self._open(key)
            input_, cached_read, cache_write = usage.input, usage.cached_read, usage.cache_write
            limit = acc[5]
            if input_ > limit or input_ < cached_read + cache_write:
                if limit != DROP:
                    self._exactly(line, stats, hint)
                continue
            acc[0] += 1
            acc[1] += input_
            acc[2] += usage.output
            acc[3] += cached_read
            acc[4] += cache_write
            if cost is not None:
                acc[6] += to_units(cost)
            if at < first:
                first = at
            if at > last:
                last = at
        self._first, self._last = first, last

    def _run_started(self, data: bytes, begin: int, end: int, stats: ScanStats) -> None:
        """Budgets and epics from the `RunStarted` lines of `data[begin:end]` (a usage line is not one)."""
        for line, _ in marked_lines(data, _STARTED_MARK, begin, end):
            if _TOKENS_MARK not in line:
                note_run_started(line, stats)

    def _exactly(self, line: bytes, stats: ScanStats, hint: str) -> None:
        """A line the groups cannot take, read as `read_samples` and `scan` read every line."""
        try:
            raw = loads(line)
        except JSONError:
            stats.skipped_lines += 1
            return
        sample = sample_from_dict(raw, hint)
        if sample is None:
            stats.skipped_lines += 1
        elif self._run_id is None or sample.run_id == self._run_id:
            self._exact.add(sample)

    def _open(self, key: _Key) -> list[Any]:
        if len(self._groups) >= GROUP_CAP:
            self._flush()
        acc: list[Any] = [0, 0, 0, 0, 0, self._limit(key), 0]
        self._groups[key] = acc
        return acc

    def _limit(self, key: _Key) -> int | float:
        """The largest input a turn of this group may have to be summed (see the module doc)."""
        run = key[1]
        if not run:
            return SLOW  # the run id comes from the file's directory: the exact path has it
        if self._run_id is not None and run != self._run_id:
            return DROP
        # The rest depends on the time, the model and the reported cost only: once per such triple.
        found = self._limits.get((key[0], key[2], key[8]))
        if found is None:
            found = self._limits[(key[0], key[2], key[8])] = self._time_limit(key[0], key[2], key[8])
        return found

    def _time_limit(self, slot: str, model: str | None, unreported: bool) -> int | float:
        hour = self._slot_hours[slot][0]
        bounds = self._bounds(hour)
        if bounds != 0:
            return bounds
        if not unreported:
            return math.inf
        rates = self._rates(model, hour)
        return rates.linear_limit if rates is not None else math.inf

    def _rates(self, model: str | None, hour: str) -> ExactRates | None:
        """The model's rates in that UTC hour (some prices change over time), once per pair."""
        key = (model or None, hour)
        if key not in self._exact_rates:
            rates = self._prices.rates(key[0], hour)
            self._exact_rates[key] = rates.exact() if rates is not None else None
        return self._exact_rates[key]

    def _bounds(self, hour: str) -> int:
        """0 when every time of this UTC hour is in [since, until), DROP when none is, else SLOW.
        A summed turn's time is `hour` + `:MM…` with MM < 60: at least `hour:00`, below `hour:60`."""
        since, until = self._since, self._until
        low, high = hour + ":00", hour + ":60"
        if (since is not None and high <= since) or (until is not None and until <= low):
            return DROP
        if (since is not None and since > low) or (until is not None and until < high):
            return SLOW
        return 0

    def _slot(self, minute: str) -> str:
        """The time part of a group key for a minute: its UTC hour when the whole hour is one local
        hour, else the hour and the minute's local hour (a half-hour zone, a change mid-hour);
        "" for a time that cannot be placed (the exact path drops it)."""
        if len(self._slots) >= SLOT_CAP:
            self._slots.clear()
        hour, mm = minute[:13], minute[14:16]
        local, whole = self._local(hour)
        slot = ""
        # `local_hour`'s checks of the minute part, without its conversion when the hour is whole.
        if local and minute[13] == ":" and len(mm) == 2 and mm.isascii() and mm.isdigit() and mm < "60":
            if not whole:
                local = local_hour(minute, self._zone)
            slot = hour if whole else f"{hour} {local}"
            self._slot_hours[slot] = (hour, local)
        self._slots[minute] = slot
        return slot

    def _local(self, hour: str) -> tuple[str, bool]:
        """The local hour of a UTC hour's first minute, and whether all 60 minutes fall in it: the
        zone's offset is the same at its first and last minute and a whole number of hours."""
        found = self._hours.get(hour)
        if found is None:
            local = local_hour(hour + ":00", self._zone)
            whole = False
            if local:
                start = datetime.fromisoformat(hour + ":00+00:00")
                offset = start.astimezone(self._zone).utcoffset()
                end = (start + timedelta(minutes=59)).astimezone(self._zone).utcoffset()
                whole = offset == end and offset is not None and not offset % timedelta(hours=1)
            found = self._hours[hour] = (local, whole)
        return found

    def _flush(self) -> None:
        """Price each open group once and add it to the tables."""
        for key, acc in self._groups.items():
            requests = acc[0]
            if not requests:
                continue  # every turn went the exact way, or was dropped
            slot, run, model, estimated, agent, executor, clone, lane, unreported = key
            hour, local = self._slot_hours[slot]
            counts = (requests, acc[1], acc[2], acc[3], acc[4])
            cost: int | None = acc[6]
            if unreported:
                rates = self._rates(model, hour)
                cost = rates.units_of_many(*counts) if rates is not None else None
            self._exact.add_group(
                (run, local, model or None, estimated),
                (agent, executor or None, clone, lane or None),
                counts,
                cost,
            )
        self._groups.clear()


def _skip_file(stats: ScanStats, path: Path, exc: OSError) -> None:
    stats.skipped_files += 1
    stats.problems.append(f"skipped {path}: {exc.strerror or exc}")
    log.warning("cost: skipped %s: %s", path, exc)
