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
import functools
import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from flowd.trace.view import (
    BatchView,
    CloneView,
    FlakyGate,
    LaneView,
    PauseView,
    PhaseSpan,
    Pricer,
    RunTotals,
    RunView,
    TaskView,
    reported_cost,
)

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
    "flowd.trace.fastfold",
    "flowd.trace.events",
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
# Fields holding dataclasses, per class: everything else is plain JSON (str, int, float, bool,
# None, lists and str-keyed dicts of those). A test pins every class's fields, so a new field is
# looked at here before it ships.
_NESTED: dict[type, dict[str, tuple[str, type]]] = {
    RunView: {
        "lanes": ("dict", LaneView),
        "clones": ("dict", CloneView),
        "totals": ("one", RunTotals),
        "flaky_gates": ("list", FlakyGate),
        "batches": ("list", BatchView),
        "pauses": ("pairs", PauseView),  # keyed by lane or None (the run's own pause)
    },
    LaneView: {"tasks": ("list", TaskView), "phases": ("list", PhaseSpan)},
}
_SKIPPED = frozenset({"pricer", "run_id"})  # the reader's own


def view_state(view: RunView) -> dict[str, Any]:
    """The view as plain JSON data (what `load_view` takes back)."""
    return _dump(view)


def _dump(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, shape in _dumped_fields(type(obj)):
        value = getattr(obj, name)
        if shape is None:
            out[name] = value
        elif shape[0] == "dict":
            out[name] = {k: _dump(v) for k, v in value.items()}
        elif shape[0] == "pairs":
            out[name] = [[k, _dump(v)] for k, v in value.items()]
        elif shape[0] == "list":
            out[name] = [_dump(v) for v in value]
        else:
            out[name] = _dump(value)
    return out


_DumpedFields = tuple[tuple[str, tuple[str, type] | None], ...]
_DUMPED: dict[type, _DumpedFields] = {}


def _dumped_fields(cls: type) -> _DumpedFields:
    # Once per class, not per object (`dataclasses.fields` was a third of a large view's dump).
    found = _DUMPED.get(cls)
    if found is None:
        nested = _NESTED.get(cls, {})
        found = tuple((f.name, nested.get(f.name)) for f in dataclasses.fields(cls) if f.name not in _SKIPPED)
        _DUMPED[cls] = found
    return found


def load_view(state: dict[str, Any], view: RunView) -> None:
    """Set `view`'s folded fields from `view_state` data (its run id and pricer stay its own).
    Raises (TypeError, KeyError, ValueError) on data that is not a view's."""
    fresh = _load(RunView, state, run_id=view.run_id, pricer=view.pricer)
    for f in dataclasses.fields(RunView):
        setattr(view, f.name, getattr(fresh, f.name))


def _load(cls: type, state: Any, **own: Any) -> Any:
    if type(state) is not dict:
        raise TypeError(f"{cls.__name__}: not an object")
    names, checks = _fields_of(cls)
    if state.keys() != names:
        raise KeyError(f"{cls.__name__}: fields {sorted(state.keys() ^ names)}")
    args = dict(state)
    for name, annotation, check, shape in checks:
        value = args[name]
        if shape is None:
            if not check(value):
                raise TypeError(f"{cls.__name__}.{name}: not a {annotation}")
        elif shape[0] == "dict":
            args[name] = {str(k): _load(shape[1], v) for k, v in value.items()}
        elif shape[0] == "pairs":
            args[name] = {_key(k): _load(shape[1], v) for k, v in value}
        elif shape[0] == "list":
            args[name] = [_load(shape[1], v) for v in value]
        else:
            args[name] = _load(shape[1], value)
    return cls(**args, **own)


_FieldCheck = tuple[str, str, "Callable[[Any], bool]", "tuple[str, type] | None"]


@functools.cache
def _fields_of(cls: type) -> tuple[frozenset[str], tuple[_FieldCheck, ...]]:
    """A class's checked fields, once per class: a checkpoint holds tens of thousands of objects
    (tasks, phases), and reading the annotations for each was most of its load (docs/performance.md)."""
    nested = _NESTED.get(cls, {})
    fields = [f for f in dataclasses.fields(cls) if f.name not in _SKIPPED]
    checks = tuple((f.name, str(f.type), _checker(str(f.type)), nested.get(f.name)) for f in fields)
    return frozenset(f.name for f in fields), checks


def _key(key: Any) -> str | None:
    if key is not None and type(key) is not str:
        raise TypeError("a pause's lane: not a string")
    return key


# Names in the view's annotations that stand for plain JSON types.
_ALIASES = {"TaskState": "str"}


def _matches(value: Any, annotation: str) -> bool:
    """Whether JSON data fits a field's annotation (`int`, `str | None`, `list[int] | None`,
    `dict[str, dict[str, str | None]]`…): what a corrupt checkpoint must not get past."""
    return _checker(annotation)(value)


@functools.cache
def _checker(annotation: str) -> Callable[[Any], bool]:
    """`_matches` for one annotation, parsed once: the alternatives are tried in order, and an
    annotation with no check raises TypeError only when a value reaches it (as before)."""
    alternatives = [_one_checker(alternative, annotation) for alternative in _split(annotation, "|")]
    if len(alternatives) == 1:
        return alternatives[0]
    return lambda value: any(check(value) for check in alternatives)


def _one_checker(alternative: str, annotation: str) -> Callable[[Any], bool]:
    name, _, rest = alternative.partition("[")
    name = _ALIASES.get(name, name)
    if name == "None":
        return lambda value: value is None
    if name in _PLAIN:
        types = _PLAIN[name]
        return lambda value: type(value) in types
    if name == "list" and rest:
        item = _checker(rest[:-1])
        return lambda value: type(value) is list and all(item(v) for v in value)
    if name == "dict" and rest:
        key_annotation, item_annotation = _split(rest[:-1], ",")
        key, item = _checker(key_annotation), _checker(item_annotation)
        return lambda value: type(value) is dict and all(key(k) and item(v) for k, v in value.items())

    def unknown(value: Any) -> bool:
        raise TypeError(f"no check for the annotation {annotation!r}")

    return unknown


_PLAIN: dict[str, tuple[type, ...]] = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,)}


def _split(text: str, sep: str) -> list[str]:
    """`text` cut at `sep` outside brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


# -- writing ---------------------------------------------------------------------------------
def capture(view: RunView, offset: int, last_line: bytes) -> bytes | None:
    """The checkpoint file of `view`, the fold of the trace's first `offset` bytes, whose last line
    (newline included) is `last_line`; None when the view's prices are not described."""
    key = pricing_key(view.pricer)
    if key is None or not last_line.endswith(b"\n") or view.last_seq == 0:
        return None
    try:
        body = orjson.dumps(view_state(view))
    except TypeError:  # orjson.JSONEncodeError: e.g. an integer past 64 bits; the run goes on
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
    return orjson.dumps(header) + b"\n" + body + b"\n"


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
    try:
        load_view(state, view)
    except (TypeError, KeyError, ValueError, AttributeError):
        return 0
    return offset


def _checked(data: bytes, trace: Path, run_id: str, key: str) -> tuple[int, dict[str, Any]] | None:
    """(offset, view state) of a checkpoint that is ours and matches the trace as it is now."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        return None
    head, _, body = data.partition(b"\n")
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError:
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
        state = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(state) is not dict or state.get("last_seq") != seq:
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
