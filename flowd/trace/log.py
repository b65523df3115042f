"""The trace: `.flow/runs/<runId>/trace.jsonl` (one event per line, flushed as it happens) and
`run.json`. One writer per run (the `flowd run` process); readers are tolerant and streaming.

Readers never hold a whole trace: `TraceFollower` reads new bytes in bounded chunks. Folding a
long trace into a view (re-attach, `flowd status`, a resumed run) starts from the view checkpoint
the writer keeps next to the trace (flowd/trace/checkpoint.py) and goes through `fold_lines` for the
rest, which skips the lines no view folds without parsing them and folds the others from typed
decoders or plain dicts, building no pydantic object for the common `TokensUsed` line
(docs/performance.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from flowd.base.fsio import write_model_atomic
from flowd.base.jsonl import JSONError, loads, marked_lines
from flowd.base.timeutil import iso, parse_iso
from flowd.base.wire import WireModel
from flowd.events.model import Envelope, Event, StoryMerged, StoryStatusChanged, dump_envelope, parse_line
from flowd.trace.checkpoint import Checkpoints, capture, checkpoint_bytes, restore, save
from flowd.trace.fastfold import fold_lines
from flowd.trace.view import RunView

# Bytes read per step: bounds a reader's memory whatever the trace's length.
CHUNK_BYTES = 1 << 20
# A "line" longer than this is no trace line (a writer's line is an event): dropped to its newline.
MAX_LINE_BYTES = 64 << 20


class RunRecord(WireModel):
    """`run.json`: {runId, epicId, plan, pid, startedAt, endedAt?, outcome?}."""

    run_id: str
    epic_id: str
    plan: str
    pid: int
    started_at: str
    ended_at: str | None = None
    outcome: str | None = None
    repo: str | None = None


def runs_dir(repo: Path) -> Path:
    return repo / ".flow" / "runs"


def run_dir(repo: Path, run_id: str) -> Path:
    return runs_dir(repo) / run_id


def trace_path(repo: Path, run_id: str) -> Path:
    return run_dir(repo, run_id) / "trace.jsonl"


def write_run_record(repo: Path, record: RunRecord) -> None:
    write_model_atomic(run_dir(repo, record.run_id) / "run.json", record)


def load_run_record(repo: Path, run_id: str) -> RunRecord | None:
    path = run_dir(repo, run_id) / "run.json"
    try:
        return RunRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None


def list_runs(repo: Path) -> list[RunRecord]:
    """Every readable run of the repository, newest first."""
    base = runs_dir(repo)
    if not base.is_dir():
        return []
    records = [r for r in (load_run_record(repo, d.name) for d in base.iterdir() if d.is_dir()) if r]
    return sorted(records, key=lambda r: r.started_at, reverse=True)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    # A zombie child of ours still answers kill(0); it is not running.
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[-1].split()
        if fields and fields[0] == b"Z":
            return False
    return True


def is_active(record: RunRecord) -> bool:
    return record.ended_at is None and pid_alive(record.pid)


def _last_seq(path: Path) -> int:
    """The seq of the last parseable line (a resumed run keeps counting)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    with path.open("rb") as handle:
        chunk = 1 << 16
        offset = max(0, size - chunk)
        while True:
            handle.seek(offset)
            lines = handle.read(size - offset).splitlines()
            for line in reversed(lines if offset == 0 else lines[1:]):
                envelope = parse_line(line)
                if envelope is not None:
                    return envelope.seq
                with contextlib.suppress(JSONError, TypeError, AttributeError):
                    seq = loads(line).get("seq")
                    if isinstance(seq, int):
                        return seq
            if offset == 0:
                return 0
            offset = max(0, offset - chunk)


class TraceWriter:
    """Appends events to a run's trace, one flushed line each; thread-safe; notifies subscribers."""

    def __init__(self, path: Path, run_id: str, on_error: Callable[[OSError], None] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A failed write (disk full, quota) stops writing, never raises into the caller: emit is
        # called from every corner of a run, cleanup paths included. `on_error` hears it once.
        self.error: OSError | None = None
        self._on_error = on_error
        self.path = path
        self.run_id = run_id
        self._seq = _last_seq(path)
        self._lock = threading.Lock()
        self._handle = path.open("ab")
        # A line torn by a kill must not swallow the next event: start on a fresh line.
        if self._handle.tell() > 0:
            with path.open("rb") as reader:
                reader.seek(-1, os.SEEK_END)
                if reader.read(1) != b"\n":
                    self._handle.write(b"\n")
        self._end = self._handle.tell()  # the trace's length once every written line is flushed
        self._last_line: bytes | None = None  # the last line written by this writer
        # Once detection asks (`outside_writes`): our lines since it last found the trace intact.
        self._since_asked: list[bytes] | None = None
        self._intact = self._end
        self._subscribers: list[Callable[[Envelope], None]] = []
        self._view: RunView | None = None
        self.checkpoints: Checkpoints | None = None

    def fold_into(self, view: RunView, checkpoint_every: int | None = None) -> None:
        """Fold every event into `view` as it is written, and checkpoint that view next to the trace
        every `checkpoint_every` bytes (default: `checkpoint_bytes()`, 4 MB) and at `close`
        (flowd/trace/checkpoint.py). `view` must be the fold of the trace as it is now
        (`fold_trace`). The fold runs under the writer's lock, so the view is always the fold of
        exactly the lines written, in their order, when a checkpoint is taken; subscribers hear
        the event after it is folded."""
        self._view = view
        self.checkpoints = Checkpoints(self.path, view, checkpoint_every)

    def subscribe(self, callback: Callable[[Envelope], None]) -> None:
        self._subscribers.append(callback)

    def emit(self, event: Event) -> Envelope:
        failed: OSError | None = None
        with self._lock:
            self._seq += 1
            envelope = Envelope(seq=self._seq, at=iso(), run_id=self.run_id, event=event)
            if self._handle.closed:
                # A straggler after the run ended (a task cancelled from outside): nothing to add.
                print(
                    f"flowd: dropped a {event.type} event after the trace of {self.run_id} closed",
                    file=sys.stderr,
                )
                return envelope
            if self.error is None:
                line = dump_envelope(envelope) + b"\n"
                try:
                    self._handle.write(line)
                    self._handle.flush()
                except OSError as exc:
                    self.error = failed = exc
                else:
                    self._end += len(line)
                    self._last_line = line
                    if self._since_asked is not None:
                        self._since_asked.append(line)
            if self._view is not None:
                # Folded even when the trace can no longer be written: budgets still count.
                self._view.apply(envelope)
                self._checkpoint(at_close=False)
        if failed is not None and self._on_error is not None:
            self._on_error(failed)
        for callback in list(self._subscribers):
            callback(envelope)
        return envelope

    def _checkpoint(self, *, at_close: bool) -> None:
        """Under the lock: checkpoint the view when due (or at close), while the trace is whole."""
        checkpoints, line = self.checkpoints, self._last_line
        if checkpoints is None or line is None or self.error is not None:
            return
        if at_close or checkpoints.due(self._end):
            checkpoints.write(self._end, line)

    def outside_writes(self) -> str | None:
        """Whether something other than this writer changed the trace since the last time it was
        asked (docs/sandbox-detection.md): None (no), "undone" (bytes were added among ours: the
        trace is cut back to where it was last found intact and our lines are written again) or
        "reported" (it was shortened or replaced: what it lost cannot be written back from here)."""
        with self._lock:
            if self._handle.closed:
                return None
            if self._since_asked is None:  # from now on, keep the lines written between two asks
                self._since_asked, self._intact = [], self._end
            try:
                on_disk = os.stat(self.path)
                ours = os.fstat(self._handle.fileno())
            except OSError:
                return "reported"
            replaced = (on_disk.st_ino, on_disk.st_dev) != (ours.st_ino, ours.st_dev)
            if replaced or on_disk.st_size < self._end:
                action: str | None = "reported"
            elif on_disk.st_size == self._end:
                action = None
            else:
                os.truncate(self._handle.fileno(), self._intact)
                self._handle.write(b"".join(self._since_asked))
                self._handle.flush()
                action = "undone"
            self._since_asked, self._intact = [], self._end
            return action

    def close(self) -> None:
        with self._lock:
            if not self._handle.closed:
                self._checkpoint(at_close=True)  # a finished run is read from here on
                try:
                    self._handle.close()
                except OSError:  # the buffered tail of a failed write: already reported
                    pass


def read_trace(path: Path) -> Iterator[Envelope]:
    """Every parseable event of a trace, in file order; unreadable lines are skipped."""
    yield from TraceFollower(path).events(to_end=True)


def fold_trace(path: Path, view: RunView) -> RunView:
    """Fold a whole trace into `view` (empty), streaming, from the trace's view checkpoint when it
    has a valid one (the same result as applying `read_trace`)."""
    follower = TraceFollower(path)
    restored = follower.restore(view)
    follower.fold_into(view, to_end=True)
    if not restored:
        follower.checkpoint(view)
    return view


class TraceFollower:
    """Reads a growing trace incrementally, only complete lines, `CHUNK_BYTES` at a time.

    `poll()`/`events()` give every event of the new lines; `fold_into(view)` folds them into a
    view without building what no view needs (re-attach). Both resume at the same offset."""

    def __init__(
        self, path: Path, chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
    ) -> None:
        self.path = path
        self.offset = 0
        self._chunk_bytes = chunk_bytes
        self._max_line = max_line_bytes
        self._partial = b""
        self._dropping = False  # inside an over-long line: skip to its newline
        self._torn = False  # a last line without its newline was folded (`to_end`)
        self._last_line = b""  # the last whole line read, newline included

    def restore(self, view: RunView) -> bool:
        """Before the first read: load the trace's view checkpoint into `view` (empty) and go on
        from the offset it covers; False (nothing changed) when there is no valid one
        (flowd/trace/checkpoint.py). The lines after it are then folded as usual."""
        if self.offset or self._partial or self._dropping:
            return False
        offset = restore(self.path, view)
        self.offset = offset
        return offset > 0

    def poll(self) -> list[Envelope]:
        return list(self.events())

    def events(self, *, to_end: bool = False) -> Iterator[Envelope]:
        """The events of the complete new lines (iterate to the end: the offset moves per chunk)."""
        for chunk in self.chunks(to_end=to_end):
            for line in chunk.split(b"\n"):
                if line:
                    envelope = parse_line(line)
                    if envelope is not None:
                        yield envelope

    def fold_into(self, view: RunView, *, to_end: bool = False) -> None:
        """Fold the complete new lines into `view`; memory stays within a chunk."""
        for chunk in self.chunks(to_end=to_end):
            fold_lines(view, chunk)

    def chunks(self, *, to_end: bool = False) -> Iterator[bytes]:
        """Runs of complete new lines, each ending in a newline, about `chunk_bytes` each.

        `to_end`: a one-shot reader's last line counts even without its newline (a follower waits
        for it instead: it may still be being written)."""
        try:
            handle = self.path.open("rb")
        except OSError:
            return
        with handle:
            handle.seek(self.offset)
            while True:
                try:
                    data = handle.read(self._chunk_bytes)
                except OSError:
                    return
                if not data:
                    if to_end and self._partial and not self._dropping:
                        self._torn = True
                        yield self._partial + b"\n"
                    return
                cut = data.rfind(b"\n") + 1
                if cut and not self._partial and not self._dropping:
                    # The common case, a chunk that starts a line: hand on its whole lines and
                    # read the torn last one again with the next chunk, rather than keep it and
                    # copy it and the next chunk into one (0.2 s of CPU over a 1 M-event trace).
                    self.offset += cut
                    self._last_line = data[data.rfind(b"\n", 0, cut - 1) + 1 : cut]
                    if cut < len(data):
                        handle.seek(self.offset)
                        data = data[:cut]
                    yield data
                    continue
                self.offset += len(data)
                lines = self._complete(data)
                if lines:
                    yield lines

    def _complete(self, data: bytes) -> bytes:
        if self._dropping:
            cut = data.find(b"\n")
            if cut < 0:
                return b""
            self._dropping = False
            data = data[cut + 1 :]
        elif self._partial:
            data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        if len(self._partial) > self._max_line:
            self._partial, self._dropping = b"", True
        if cut:
            self._last_line = data[data.rfind(b"\n", 0, cut - 1) + 1 : cut]
        return data[:cut]

    def checkpoint(self, view: RunView) -> bool:
        """After folding a trace from its start into `view` (no valid checkpoint was found: a run
        killed before its first one, or checkpointed with other prices or another flowd): leave
        one at the last whole line folded, for the next reader, when the trace is long enough
        for it to matter. Never after folding a torn last line (it is not in the trace whole)."""
        end = self.offset - len(self._partial)
        if self._dropping or self._torn or not self._last_line or end < checkpoint_bytes():
            return False
        data = capture(view, end, self._last_line)
        return data is not None and save(self.path, data)


# Lines that start or finish a story, found by their marks before anything is parsed.
_STORY_MARKS = re.compile(rb'"type":"(?:StoryStatusChanged|StoryMerged)"')
HISTORY_RUNS = 10


def story_durations(repo: Path, limit: int = HISTORY_RUNS) -> dict[str, float]:
    """Seconds from a story's start (`StoryStatusChanged` active) to its merge (`StoryMerged`) in
    the repository's 10 most recent runs (the latest measurement of each story wins): the history
    `flowd.plan.graph.estimate_durations` ranks by."""
    out: dict[str, float] = {}
    for record in reversed(list_runs(repo)[:limit]):  # oldest first: later runs overwrite
        run_id = record.run_id
        started: dict[str, datetime] = {}
        for chunk in TraceFollower(trace_path(repo, run_id)).chunks():
            for line, _ in marked_lines(chunk, _STORY_MARKS):
                _note_story(line, started, out)
    return out


def _note_story(line: bytes, started: dict[str, datetime], out: dict[str, float]) -> None:
    envelope = parse_line(line)
    if envelope is None:
        return
    event = envelope.event
    try:
        at = parse_iso(envelope.at)
    except ValueError:
        return
    if isinstance(event, StoryStatusChanged) and event.status == "active":
        started.setdefault(event.story, at)
    elif isinstance(event, StoryMerged) and event.lane in started:
        out[event.lane] = max(0.0, (at - started.pop(event.lane)).total_seconds())
