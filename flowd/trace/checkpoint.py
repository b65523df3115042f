"""Checkpoints of a run's folded view: re-attaching to a long trace folds only its tail.

`flowd run` folds its own trace into a `RunView` as it writes it (`TraceWriter.fold_into`). Every
`CHECKPOINT_BYTES` of trace, and when the trace closes, it writes that view next to the trace as
`view-checkpoint.jsonl` (temp file + rename), with the byte offset of the trace it covers and what
it takes to check that it still matches the trace. Every reader that folds a trace from its start
(`flowd status`, the server's re-attach, a resumed run, reports, earlier pauses) starts from a
valid checkpoint and folds only the lines after its offset; anything that does not check out
(no file, a torn or corrupt one, another format or fold version, other prices, a trace that no
longer holds the line the checkpoint ends on) is ignored and the whole trace is folded, as before.
The format and the rules are documented in docs/trace.md ("View checkpoint").

A checkpoint is the same fold, cut at a line boundary: folding from it and then the tail gives
exactly the view of the full fold (tests/test_view_checkpoint.py checks it at every offset).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import sys
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from flowd.base.jsonl import JSONError, dumps, loads
from flowd.trace.usage import Pricer, reported_cost
from flowd.trace.view import PauseView, RunView

FILE_NAME = "view-checkpoint.jsonl"
FORMAT = 1
# Trace bytes between two checkpoints: a reader folds at most this much (about 16 k events) besides
# the checkpoint, whatever the trace's length. Writing one costs a few ms of the runner's time.
CHECKPOINT_BYTES = 4 << 20
# Overrides CHECKPOINT_BYTES (tests checkpoint after every line; docs/trace.md).
ENV_BYTES = "FLOWD_CHECKPOINT_BYTES"
# A checkpoint is a view (a few KB per lane); anything bigger than this is not one of ours.
MAX_CHECKPOINT_BYTES = 64 << 20
# The modules whose code decides what a fold gives: a checkpoint written by other code is stale.
_FOLD_MODULES = (
    "flowd.trace.view",
    "flowd.trace.timeline",
    "flowd.trace.usage",
    "flowd.trace.fastfold",
    "flowd.events.model",
    __name__,
)
_PRICING_ATTR = "flowd_pricing_key"
_REPORTED = "reported"


def checkpoint_path(trace: Path) -> Path:
    return trace.with_name(FILE_NAME)


def checkpoint_bytes() -> int:
    """Trace bytes between two checkpoints: `FLOWD_CHECKPOINT_BYTES` when it is a positive
    integer, else `CHECKPOINT_BYTES`."""
    value = os.environ.get(ENV_BYTES, "")
    return int(value) if value.isdigit() and int(value) > 0 else CHECKPOINT_BYTES


# -- pricing: a checkpoint's costs hold only for the prices it was folded with -----------------
def with_pricing_key(pricer: Pricer, key: str) -> Pricer:
    """Mark a pricer with what its prices depend on (checkpoints are used only with equal keys)."""
    setattr(pricer, _PRICING_ATTR, key)
    return pricer


def pricing_key(pricer: Pricer) -> str | None:
    """What a pricer's prices depend on; None for a pricer nobody described (no checkpoints)."""
    if pricer is reported_cost:
        return _REPORTED
    key = getattr(pricer, _PRICING_ATTR, None)
    return key if isinstance(key, str) else None


def fold_version() -> str:
    """A digest of the fold's code: a flowd whose fold differs never takes another's checkpoint."""
    return _FOLD_VERSION


def _digest_fold_code() -> str:
    # At import, next to the fold's own imports: the digest is of the code this process runs even
    # when the files are replaced (flowd upgraded) while it runs.
    digest = hashlib.sha256()
    for name in _FOLD_MODULES:
        module = sys.modules.get(name)
        if module is None:
            __import__(name)
            module = sys.modules[name]
        digest.update(name.encode() + b"\0" + Path(str(module.__file__)).read_bytes() + b"\0")
    return digest.hexdigest()[:32]


# -- the view as JSON ----------------------------------------------------------------------------
# The view's folded fields, as one msgspec struct made from `RunView`'s own fields and types (no
# second declaration to keep in step), and decoded by type: every field, nested views included,
# must have its type exactly (no text for a number, no bool for an int); the top level must have
# every field and no other. A nested view's missing field takes its default and an unknown one is
# ignored: what detects a changed file is the digest, this only keeps a corrupt one from reaching
# the fold. Pauses are keyed by lane or None (the run's own pause), so they travel as pairs.
_SKIPPED = frozenset({"pricer", "run_id"})  # the reader's own
_AS_PAIRS = {"pauses": list[tuple[str | None, PauseView]]}
_State = msgspec.defstruct(
    "_State",
    [
        (f.name, _AS_PAIRS.get(f.name, hint))
        for f in dataclasses.fields(RunView)
        if f.name not in _SKIPPED
        for hint in [typing.get_type_hints(RunView)[f.name]]
    ],
    forbid_unknown_fields=True,
    gc=False,
)
_STATE_NAMES = _State.__struct_fields__
_decode_state = msgspec.json.Decoder(_State).decode
_encode = msgspec.json.Encoder().encode


def _state_of(view: RunView) -> Any:
    fields = {name: getattr(view, name) for name in _STATE_NAMES}
    fields["pauses"] = list(view.pauses.items())
    return _State(**fields)


def _load(state: Any, view: RunView) -> None:
    """Set `view`'s folded fields from a decoded `_State` (its run id and pricer stay its own)."""
    for name in _STATE_NAMES:
        setattr(view, name, getattr(state, name))
    view.pauses = dict(state.pauses)


# -- writing ---------------------------------------------------------------------------------
def capture(view: RunView, offset: int, last_line: bytes) -> bytes | None:
    """The checkpoint file of `view`, the fold of the trace's first `offset` bytes, whose last line
    (newline included) is `last_line`; None when the view's prices are not described."""
    key = pricing_key(view.pricer)
    if key is None or not last_line.endswith(b"\n") or view.last_seq == 0:
        return None
    try:
        body = _encode(_state_of(view))
    except (TypeError, ValueError):  # e.g. a lone surrogate in a title; the run goes on
        return None
    header = {
        "v": FORMAT,
        "fold": fold_version(),
        "pricing": key,
        "runId": view.run_id,
        "offset": offset,
        "seq": view.last_seq,
        "lineStart": offset - len(last_line),
        "lineSha256": hashlib.sha256(last_line).hexdigest(),
        "viewSha256": hashlib.sha256(body).hexdigest(),
    }
    return dumps(header) + b"\n" + body + b"\n"


def save(trace: Path, data: bytes) -> bool:
    """Write a captured checkpoint next to `trace` (temp + rename: a reader sees the old one or the
    new one, whole). A checkpoint is only a shortcut, so a failed write just leaves none (no
    fsync either: a file torn by a crash fails its check and the trace is folded in full)."""
    path = checkpoint_path(trace)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=path.parent)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


# -- reading ---------------------------------------------------------------------------------
def restore(trace: Path, view: RunView) -> int:
    """Load the trace's checkpoint into `view`, an empty view of that run; the trace offset the
    loaded fold reaches (fold from there on), or 0 when there is no valid checkpoint (fold it all).
    `view` is left as it was unless the checkpoint is valid."""
    if view.last_seq or view.lanes or view.started_at is not None:
        return 0  # only an empty view can take a fold's state
    key = pricing_key(view.pricer)
    if key is None:
        return 0
    try:
        with checkpoint_path(trace).open("rb") as handle:
            data = handle.read(MAX_CHECKPOINT_BYTES + 1)
    except OSError:
        return 0
    found = _checked(data, trace, view.run_id, key)
    if found is None:
        return 0
    offset, state = found
    _load(state, view)
    return offset


def _checked(data: bytes, trace: Path, run_id: str, key: str) -> tuple[int, Any] | None:
    """(offset, view state) of a checkpoint that is ours and matches the trace as it is now."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        return None
    head, _, body = data.partition(b"\n")
    try:
        header = loads(head)
    except JSONError:
        return None
    if type(header) is not dict:
        return None
    offset, start, seq = header.get("offset"), header.get("lineStart"), header.get("seq")
    if not (
        header.get("v") == FORMAT
        and header.get("fold") == fold_version()
        and header.get("pricing") == key
        and header.get("runId") == run_id
        and type(offset) is int
        and type(start) is int
        and type(seq) is int
        and 0 <= start < offset
        and body.endswith(b"\n")
        and hashlib.sha256(body[:-1]).hexdigest() == header.get("viewSha256")
        and _line_matches(trace, start, offset, header.get("lineSha256"))
    ):
        return None
    try:
        state: Any = _decode_state(body)
    except msgspec.MsgspecError:
        return None
    if state.last_seq != seq:
        return None
    return offset, state


def _line_matches(trace: Path, start: int, end: int, digest: Any) -> bool:
    """Whether the trace still holds, at [start, end), the line the checkpoint ends on."""
    if end - start > 64 << 20:
        return False
    try:
        with trace.open("rb") as handle:
            if start > 0:
                handle.seek(start - 1)
                if handle.read(1) != b"\n":
                    return False  # the line must start a line
            line = handle.read(end - start)
    except OSError:
        return False
    return line.endswith(b"\n") and hashlib.sha256(line).hexdigest() == digest


# -- the writer's side -------------------------------------------------------------------------
class Checkpoints:
    """When a writer's view is checkpointed: every `every` bytes of trace, and at the end."""

    def __init__(self, trace: Path, view: RunView, every: int | None = None) -> None:
        self.trace = trace
        self.view = view
        self.every = every if every is not None else checkpoint_bytes()
        self.saved = 0  # the offset of the last checkpoint written (0: none yet)
        self.written: Callable[[int], None] | None = None  # tests: hears each checkpoint's offset

    def due(self, offset: int) -> bool:
        return offset - self.saved >= self.every

    def write(self, offset: int, last_line: bytes) -> None:
        """Checkpoint the view, the fold of the trace's first `offset` bytes (call it where no
        other line can be written or folded meanwhile: the writer's lock)."""
        if offset <= self.saved:
            return
        data = capture(self.view, offset, last_line)
        if data is not None and save(self.trace, data):
            self.saved = offset
            if self.written is not None:
                self.written(offset)


_FOLD_VERSION = _digest_fold_code()
