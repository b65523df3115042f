"""JSON lines as flowd reads and writes them: one JSON stack (msgspec) and one scan of trace bytes.

Every trace line, view checkpoint and JSON report goes through msgspec: `loads`/`dumps` for plain
values, and the typed decoders (`msgspec.json.Decoder(SomeStruct)`) the hot readers build for the
lines they fold or sum, which orjson has no counterpart for (docs/performance.md).

`marked_lines` is the one way a reader finds the lines it needs in a block of trace bytes without
splitting or parsing the others: a bytes search for a mark (a literal, or a regular expression of
several), then the whole line around each hit, once per line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

# What `loads` raises on anything but one JSON document (a `ValueError`, as json's is).
JSONError = msgspec.MsgspecError

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def dumps(value: Any) -> bytes:
    """Compact JSON bytes; a value JSON cannot hold raises TypeError. A string with a lone
    surrogate (a file name that is not UTF-8, as Python reads it: `os.fsdecode`) is written with
    its bytes escaped (`bad\\xffname.txt`): one such name an agent wrote must not stop the trace."""
    try:
        return _encode(value)
    except UnicodeEncodeError:
        return _encode(_escaped(value))


def utf8_text(text: str) -> str:
    """`text` as UTF-8 can hold it: the bytes of a file name that is not UTF-8 (`os.fsdecode`
    made them lone surrogates) written as escapes, `bad\\xffname.txt`; any other text as it is."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name made
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    return value


def loads(data: bytes | str) -> Any:
    """One JSON document to Python values; `JSONError` when it is not one. Integers of any size
    stay integers; nesting past the interpreter's recursion limit is an error like any other."""
    try:
        return _decode(data)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply") from None


def dumps_indented(value: Any) -> bytes:
    """`dumps` with two-space indentation (reports meant to be read)."""
    return msgspec.json.format(dumps(value), indent=2)


def marked_lines(
    data: bytes, mark: bytes | re.Pattern[bytes], begin: int = 0, end: int | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """Each line of `data[begin:end]` (whole lines: no line is cut by `begin` or `end`) that holds
    `mark`, once, with the mark found (a pattern's group 1 when it has one, else its match).

    A literal is searched with `bytes.find` (a pattern costs 25 % more per hit even for one literal:
    the cost reader's hot path); a pattern finds several marks in one pass (the fold's 17 types)."""
    if end is None:
        end = len(data)
    find, rfind = data.find, data.rfind
    if isinstance(mark, bytes):
        pos = find(mark, begin, end)
        while pos >= 0:
            start = rfind(b"\n", begin, pos) + 1 or begin
            stop = find(b"\n", pos, end)
            if stop < 0:
                stop = end
            yield data[start:stop], mark
            pos = find(mark, stop, end)
        return
    group = 1 if mark.groups else 0
    last = -1
    for match in mark.finditer(data, begin, end):
        start = rfind(b"\n", begin, match.start()) + 1 or begin
        if start == last:
            continue  # a second mark in one line (an object nested in the event)
        last = start
        stop = find(b"\n", match.end(), end)
        yield data[start : stop if stop >= 0 else end], match[group]
