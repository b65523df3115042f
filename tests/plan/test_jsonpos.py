from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flowd.plan.jsonpos import JsonPath, LineIndex, scan_positions

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def walk(value: Any, path: JsonPath = ()) -> list[tuple[JsonPath, Any]]:
    out = [(path, value)]
    if isinstance(value, list):
        for i, item in enumerate(value):
            out += walk(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            out += walk(item, (*path, key))
    return out


def offset(text: str, line: int, column: int) -> int:
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return starts[line] + column


@given(documents, st.sampled_from([None, 0, 2]), st.booleans(), st.booleans())
def test_every_value_span_slices_back_to_that_value(
    doc: Any, indent: int | None, crlf: bool, ascii_only: bool
) -> None:
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    if crlf:
        text = text.replace("\n", "\r\n")
    text = "  " + text + " \n"
    positions = scan_positions(text)
    for path, value in walk(doc):
        span = positions.values[path]
        piece = text[offset(text, span.line, span.column) : offset(text, span.end_line, span.end_column)]
        assert json.loads(piece) == value
        if path and isinstance(path[-1], str):
            key_span = positions.keys[path]
            key = text[
                offset(text, key_span.line, key_span.column) : offset(
                    text, key_span.end_line, key_span.end_column
                )
            ]
            assert json.loads(key) == path[-1]


def test_a_span_inside_a_larger_text_uses_file_coordinates() -> None:
    text = 'prose\n```json storyplan\n{"a": [1,\n  2]}\n```\n'
    start = text.index("{")
    end = text.index("\n```", start)
    positions = scan_positions(text, start, end, LineIndex(text))
    assert positions.values[("a", 1)].line == 3 and positions.values[("a", 1)].column == 2
    assert positions.keys[("a",)].line == 2
