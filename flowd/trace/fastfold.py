"""Trace lines (bytes) folded into a `RunView` fast: what re-attach, `flowd status` and a resumed
run use to read a long trace (docs/performance.md).

The result is exactly `view.apply(parse_line(line))` for each line (tests/test_trace_fold.py checks
it), reached with less work:

- a line whose event type no view folds (`flowd.trace.view.FOLDED_TYPES`: tool calls, messages, gates,
  stages… most of a trace) is not parsed at all. Lines as `TraceWriter` writes them start with
  `_WRITER_PREFIX`, and the first `_TYPE_MARK` in such a line is its event's type (the envelope's
  other fields are scalars; `event` comes last). When every line of a chunk is in that format, one
  regular-expression scan finds the lines with a folded type's mark and nothing else is touched;
- `TokensUsed`, lease and `GateResult` lines (the bulk of what is folded) are decoded by msgspec
  decoders typed to exactly what the fold takes without pydantic: strict (no text for a number, no
  bool for an int, no unknown usage, lease or gate key), so a line they take is one pydantic would take unchanged,
  and the decoded struct is folded as it is (no dict, no per-field checks in Python);
- the other lines that matter, and any line those decoders refuse, are parsed (`flowd.base.jsonl`) and,
  when the envelope and event have exactly their fields' types, folded from the dict. Anything
  else (a missing field, text where a number belongs, another writer's spacing) goes through
  pydantic, which decides as it does for `parse_line`.

A trace's seq only grows (one writer per run, resumed runs continue it), so skipping lines does not
change which lines `RunView.accept` takes as replays.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

import msgspec
from pydantic import ValidationError

from flowd.base.jsonl import JSONError, loads, marked_lines
from flowd.events.model import EVENT_CLASSES, Event, GateWhere, envelope_from_dict
from flowd.trace.usage import Tokens
from flowd.trace.view import FOLDED_TYPES, RunView

_WRITER_PREFIX = b'{"v":1,"seq":'
_TYPE_MARK = b'"event":{"type":"'
_FOLDED_BYTES = frozenset(t.encode() for t in FOLDED_TYPES)


def _branching(words: frozenset[bytes]) -> bytes:
    """`words` as one regular expression that branches a letter at a time. The regular-expression
    engine tries an alternation's branches one after another, at every line of a trace: the folded
    types as a plain alternation cost a try each a line, this a few."""
    by_first: dict[bytes, set[bytes]] = {}
    for word in words:
        by_first.setdefault(word[:1], set()).add(word[1:])
    ends = by_first.pop(b"", None) is not None  # a word ends here (another goes on)
    branches = [re.escape(first) + _branching(frozenset(rest)) for first, rest in sorted(by_first.items())]
    if not branches:
        return b""
    if len(branches) == 1 and not ends:
        return branches[0]
    return b"(?:" + b"|".join(branches) + b")" + (b"?" if ends else b"")


_FOLDED_MARK = re.compile(re.escape(_TYPE_MARK) + b"(" + _branching(_FOLDED_BYTES) + b')"')
# A line that does not start in the writer's format (the chunk's last newline ends the last line).
_OTHER_LINE = re.compile(rb"\n(?!" + re.escape(_WRITER_PREFIX) + rb"|\Z)")
_USAGE_KEYS = frozenset({"input", "output", "total", "cachedRead", "cacheWrite", "costUsd"})
_LEASE_KEYS = frozenset({"type", "executor", "clone", "role", "label", "borrowed"})
_TOKENS_BYTES = b"TokensUsed"
_LEASE_BYTES = (b"ExecutorLeased", b"ExecutorReleased")
_GATE_BYTES = b"GateResult"

# The typed decoders of the two hot line kinds. Integers past 63 bits are refused here (the fold's
# fast paths never took them): they take the dict path, whose checks then send them on.
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
_E = TypeVar("_E")


class _Usage(msgspec.Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    """A usage exactly as `_tokens` takes it; also the `UsageLike` the fold prices."""

    input: _Int = 0
    output: _Int = 0
    total: _Int = 0
    cached_read: _Int | None = None
    cache_write: _Int | None = None
    cost_usd: _Int | float | None = None  # an int is read as one, and sent the dict way (coerced)


class _TokensEvent(msgspec.Struct, gc=False):
    type: Literal["TokensUsed"]
    agent: str
    usage: _Usage
    lane: str | None = None
    model: str | None = None
    executor: str | None = None
    clone: _Int | None = None
    estimated: bool = False


class _LeaseEvent(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    type: Literal["ExecutorLeased", "ExecutorReleased"]
    executor: str
    role: str
    clone: _Int | None = None
    label: str | None = None
    borrowed: bool | None = None


class _GateEvent(msgspec.Struct, gc=False, rename="camel", forbid_unknown_fields=True):
    """A `GateResult` with every field of the event model, each of exactly its type (one per task
    gate run: as common as leases in a long trace)."""

    type: Literal["GateResult"]
    where: GateWhere
    gate: str
    ok: bool
    exit_code: _Int
    duration_ms: _Int
    lane: str | None = None


class _Line(msgspec.Struct, Generic[_E], gc=False, rename={"run_id": "runId"}):
    """A writer-format envelope around one of the typed events above."""

    seq: _Int
    at: str
    run_id: str
    event: _E
    v: Literal[1] = 1


_DECODE_TOKENS = msgspec.json.Decoder(_Line[_TokensEvent]).decode
_DECODE_LEASE = msgspec.json.Decoder(_Line[_LeaseEvent]).decode
_DECODE_GATE = msgspec.json.Decoder(_Line[_GateEvent]).decode
_TYPED: dict[bytes, Callable[[bytes], _Line[Any]]] = {
    _TOKENS_BYTES: _DECODE_TOKENS,
    **dict.fromkeys(_LEASE_BYTES, _DECODE_LEASE),
    _GATE_BYTES: _DECODE_GATE,
}


def fold_lines(view: RunView, chunk: bytes) -> None:
    """Fold complete trace lines (`chunk` ends with a newline) into `view`.

    The first folded line always goes the slow way: it also sets the view's start time, whatever
    its type."""
    writer_format = chunk.startswith(_WRITER_PREFIX) and _OTHER_LINE.search(chunk) is None
    if view.started_at is None or not writer_format:
        for line in chunk.split(b"\n"):
            if line and (view.started_at is None or _folded(line)):
                fold_line(view, line)
        return
    for line, kind in marked_lines(chunk, _FOLDED_MARK):
        if not _fold_typed(view, line, kind):
            fold_line(view, line)


def _fold_typed(view: RunView, line: bytes, kind: bytes) -> bool:
    """A `TokensUsed`, lease or `GateResult` line in exactly its typed decoder's shape, folded;
    False: nothing was done (the dict path or pydantic decides)."""
    decode = _TYPED.get(kind)
    if decode is None:
        return False
    try:
        record = decode(line)
    except msgspec.MsgspecError:
        return False
    event = record.event
    if type(event) is _TokensEvent:
        if type(event.usage.cost_usd) is int:
            return False  # pydantic reads it as a float: the dict path does the same
        if view.accept(record.seq, record.at, record.run_id):
            view.apply_tokens(event.lane, event.model, event.usage, event.estimated)
    elif view.accept(record.seq, record.at, record.run_id):
        if type(event) is _LeaseEvent:
            leased = event.type == "ExecutorLeased"
            view.apply_lease(leased, event.executor, event.clone, event.role, event.label, event.borrowed)
        else:
            view.apply_gate(event.lane, event.where, event.duration_ms, record.at)
    return True


def _folded(line: bytes) -> bool:
    """False only for a writer-format line whose event type no view folds."""
    if not line.startswith(_WRITER_PREFIX):
        return True
    start = line.find(_TYPE_MARK)
    if start < 0:
        return True
    start += len(_TYPE_MARK)
    return line[start : line.find(b'"', start)] in _FOLDED_BYTES


def fold_line(view: RunView, line: bytes) -> None:
    """Fold one trace line of any shape into `view` (as `view.apply(parse_line(line))`)."""
    try:
        raw = loads(line)
    except JSONError:
        return
    if type(raw) is dict:
        event, seq, at, run_id = raw.get("event"), raw.get("seq"), raw.get("at"), raw.get("runId")
        version = raw.get("v", 1)
        if (
            type(event) is dict
            and type(seq) is int
            and type(at) is str
            and type(run_id) is str
            and type(version) is int
            and version == 1
            and _fold_event(view, event, seq, at, run_id)
        ):
            return
    envelope = envelope_from_dict(raw)
    if envelope is not None:
        view.apply(envelope)


def _tokens(event: dict[str, Any], usage: Any) -> Tokens | None:
    """A `TokensUsed` event's usage when every field has exactly its type; else None."""
    if type(usage) is not dict or type(event.get("agent")) is not str or not usage.keys() <= _USAGE_KEYS:
        return None  # (other usage keys: e.g. snake_case names, which pydantic also accepts)
    lane, model, executor, clone = (
        event.get("lane"),
        event.get("model"),
        event.get("executor"),
        event.get("clone"),
    )
    if not (
        (lane is None or type(lane) is str)
        and (model is None or type(model) is str)
        and (executor is None or type(executor) is str)
        and (clone is None or type(clone) is int)
        and type(event.get("estimated", False)) is bool
    ):
        return None
    input_, output, total = usage.get("input", 0), usage.get("output", 0), usage.get("total", 0)
    cached, written, cost = usage.get("cachedRead"), usage.get("cacheWrite"), usage.get("costUsd")
    if not (
        type(input_) is int
        and type(output) is int
        and type(total) is int
        and (cached is None or type(cached) is int)
        and (written is None or type(written) is int)
        and (cost is None or type(cost) is float)
    ):
        return None
    return Tokens(input_, output, total, cached, written, cost)


def _fold_event(view: RunView, event: dict[str, Any], seq: int, at: str, run_id: str) -> bool:
    """Fold one event of a well-formed envelope; False when pydantic must decide instead."""
    kind = event.get("type")
    if kind == "TokensUsed":
        tokens = _tokens(event, event.get("usage"))
        if tokens is None:
            return False
        if view.accept(seq, at, run_id):
            view.apply_tokens(event.get("lane"), event.get("model"), tokens, event.get("estimated") is True)
        return True
    if kind == "ExecutorLeased" or kind == "ExecutorReleased":
        # One pair per planner, reviewer and judge turn: common enough for their own fast path.
        if not _lease_shape(event):
            return False
        if view.accept(seq, at, run_id):
            view.apply_lease(
                kind == "ExecutorLeased", event["executor"], event.get("clone"), event["role"],
                event.get("label"), event.get("borrowed"),
            )  # fmt: skip
        return True
    if kind not in FOLDED_TYPES:
        return False
    try:
        parsed = cast(Event, EVENT_CLASSES[cast(str, kind)].model_validate(event))
    except ValidationError:
        return True  # what parse_line does with it: skipped
    if view.accept(seq, at, run_id):
        view.apply_event(parsed, at)
    return True


def _lease_shape(event: dict[str, Any]) -> bool:
    """Whether a lease event has exactly its fields' types (then pydantic would take it as it is)."""
    clone, label, borrowed = event.get("clone"), event.get("label"), event.get("borrowed")
    return (
        event.keys() <= _LEASE_KEYS
        and type(event.get("executor")) is str
        and type(event.get("role")) is str
        and (clone is None or type(clone) is int)
        and (label is None or type(label) is str)
        and (borrowed is None or type(borrowed) is bool)
    )
