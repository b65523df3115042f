"""The story hash: the resume key of a story's branch (docs/architecture.md).

A story whose plan entry changed since its branch was created starts over; one that did not
resumes. The hash is bit-compatible with the original system's: 32-bit FNV-1a over the UTF-16
code units of JavaScript-`JSON.stringify`-compatible compact JSON, printed as unpadded lowercase
hex, so state written by either side resumes on the other.
"""

from __future__ import annotations

from flowd.base import paths
from flowd.plan.model import Story

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_MASK = 0xFFFFFFFF

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

JsonLike = str | bool | list[str] | None


def js_string(value: str) -> str:
    """A string literal exactly as JavaScript's `JSON.stringify` writes it (ES2019+)."""
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            # Control characters, and lone surrogates (well-formed JSON.stringify), as \uXXXX.
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def js_compact(obj: dict[str, JsonLike]) -> str:
    """Compact JSON of a flat object of strings, booleans and string lists, key order kept."""
    parts = []
    for key, value in obj.items():
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, str):
            rendered = js_string(value)
        elif value is None:
            rendered = "null"
        else:
            rendered = "[" + ",".join(js_string(v) for v in value) + "]"
        parts.append(js_string(key) + ":" + rendered)
    return "{" + ",".join(parts) + "}"


def fnv1a_utf16(text: str) -> str:
    """FNV-1a 32 over the UTF-16 code units of `text`, unpadded lowercase hex."""
    h = _FNV_OFFSET
    data = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= data[i] | (data[i + 1] << 8)
        h = (h * _FNV_PRIME) & _MASK
    return format(h, "x")


def story_hash_input(story: Story) -> str:
    """The exact JSON the hash runs over (exposed for tests and debugging)."""
    obj: dict[str, JsonLike] = {
        "id": story.id,
        "title": story.title,
        "description": story.description,
        "dependsOn": list(story.depends_on),
        "owned": [paths.normalize(p) for p in story.owned],
        "sharedReadOnly": [paths.normalize(p) for p in story.shared_read_only],
        "provides": list(story.provides),
    }
    # Later fields appear only when set, so plans written before they existed keep their hashes.
    if story.read_first:
        obj["readFirst"] = [paths.normalize(p) for p in story.read_first]
    if story.acceptance:
        obj["acceptance"] = list(story.acceptance)
    if story.tests_change:
        obj["testsChange"] = True
    return js_compact(obj)


def story_hash(story: Story) -> str:
    return fnv1a_utf16(story_hash_input(story))


def stable_hash(text: str) -> str:
    """The same hash over any text (the original names plan files and epic id suffixes with it)."""
    return fnv1a_utf16(text)
