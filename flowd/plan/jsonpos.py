"""Where each value of a JSON document sits in its file, for diagnostics at the offending field.

The stdlib decoder keeps no positions, so this scanner walks the same text once more (after
`json.loads` accepted it) and records, for every value and every object key, its span keyed by its
JSON path (`("stories", 2, "owned", 0)`). It is linear in the text and never builds values.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field

JsonPath = tuple[str | int, ...]

_WS = " \t\r\n"


@dataclass(frozen=True)
class Span:
    """0-based start and end (exclusive) line and column, columns counted in characters."""

    line: int
    column: int
    end_line: int
    end_column: int


class LineIndex:
    """Offsets to (line, column) in O(log lines); `\\r\\n` ends a line like `\\n`."""

    def __init__(self, text: str) -> None:
        self._starts = [0]
        at = text.find("\n")
        while at != -1:
            self._starts.append(at + 1)
            at = text.find("\n", at + 1)

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._starts, offset) - 1
        return line, offset - self._starts[line]

    def span(self, start: int, end: int) -> Span:
        line, column = self.position(start)
        end_line, end_column = self.position(end)
        return Span(line, column, end_line, end_column)


@dataclass
class Positions:
    """Spans of values and of object keys, by JSON path. Empty when the file did not decode."""

    values: dict[JsonPath, Span] = field(default_factory=dict)
    keys: dict[JsonPath, Span] = field(default_factory=dict)

    def find(self, path: JsonPath) -> Span | None:
        """The value at `path`, else its key, else the nearest enclosing value that exists."""
        if path in self.values:
            return self.values[path]
        if path in self.keys:
            return self.keys[path]
        for n in range(len(path) - 1, -1, -1):
            if path[:n] in self.values:
                return self.values[path[:n]]
        return None

    def story(self, index: int, field_name: str | None = None, item: int | None = None) -> Span | None:
        """Where to show a problem with story `index`, its `field_name` (wire name) or list `item`.

        A whole field points at its key (short, readable squiggle); a missing field at the story.
        """
        base: JsonPath = ("stories", index)
        if field_name is None:
            key = self.keys.get((*base, "id"))
            return key or self.values.get(base)
        if item is not None and (*base, field_name, item) in self.values:
            return self.values[(*base, field_name, item)]
        if field_name == "id" and (*base, "id") in self.values:
            return self.values[(*base, "id")]
        return self.keys.get((*base, field_name)) or self.story(index)


class _Scanner:
    def __init__(self, text: str, start: int, end: int, index: LineIndex) -> None:
        self.text = text
        self.i = start
        self.end = end
        self.index = index
        self.out = Positions()

    def skip_ws(self) -> None:
        text, i, end = self.text, self.i, self.end
        while i < end and text[i] in _WS:
            i += 1
        self.i = i

    def string_end(self, i: int) -> int:
        """`i` is at the opening quote; the offset just past the closing quote."""
        text = self.text
        i += 1
        while True:
            quote = text.find('"', i)
            if quote == -1:
                return self.end
            backslashes = 0
            j = quote - 1
            while text[j] == "\\":
                backslashes += 1
                j -= 1
            if backslashes % 2 == 0:
                return quote + 1
            i = quote + 1

    def scan(self) -> Positions:
        # An explicit stack instead of recursion: plan depth is small, but a pathological file
        # should not hit the recursion limit after json.loads accepted it.
        self.skip_ws()
        self.value(())
        return self.out

    def value(self, root: JsonPath) -> None:
        text = self.text
        # Each frame: (path of the container, opening offset, next list index or -1 for objects)
        stack: list[tuple[JsonPath, int, int]] = []
        path = root
        while True:
            self.skip_ws()
            start = self.i
            ch = text[start] if start < self.end else ""
            if ch in "{[":
                stack.append((path, start, -1 if ch == "{" else 0))
                self.i += 1
                self.skip_ws()
                if text[self.i] in "}]":
                    self.i += 1
                    self._close(stack.pop())
                    if not self._after_value(stack):
                        return
                    path = self._next_path(stack)
                    continue
                path = self._next_path(stack)
                continue
            if ch == '"':
                self.i = self.string_end(start)
            else:
                i = start
                while i < self.end and text[i] not in _WS and text[i] not in ",]}":
                    i += 1
                self.i = i
            self.out.values[path] = self.index.span(start, self.i)
            if not self._after_value(stack):
                return
            path = self._next_path(stack)

    def _close(self, frame: tuple[JsonPath, int, int]) -> None:
        path, start, _ = frame
        self.out.values[path] = self.index.span(start, self.i)

    def _after_value(self, stack: list[tuple[JsonPath, int, int]]) -> bool:
        """Consume `,` or closers after a value; False when the root value is complete."""
        while stack:
            self.skip_ws()
            ch = self.text[self.i] if self.i < self.end else ""
            if ch == ",":
                self.i += 1
                path, start, n = stack[-1]
                if n >= 0:
                    stack[-1] = (path, start, n + 1)
                return True
            if ch in "}]":
                self.i += 1
                self._close(stack.pop())
                continue
            return False  # malformed: json.loads would have refused it
        return False

    def _next_path(self, stack: list[tuple[JsonPath, int, int]]) -> JsonPath:
        path, _, n = stack[-1]
        if n >= 0:
            return (*path, n)
        # An object member: read the key, record its span, and step over the colon.
        self.skip_ws()
        start = self.i
        self.i = self.string_end(start)
        key = self.text[start + 1 : self.i - 1]
        if "\\" in key:
            key = json.loads(self.text[start : self.i])
        member = (*path, key)
        self.out.keys[member] = self.index.span(start, self.i)
        self.skip_ws()
        self.i += 1  # the ':'
        return member


def scan_positions(
    text: str, start: int = 0, end: int | None = None, index: LineIndex | None = None
) -> Positions:
    """Spans of the JSON value in `text[start:end]`, in the coordinates of the whole `text`."""
    stop = len(text) if end is None else end
    return _Scanner(text, start, stop, index or LineIndex(text)).scan()
