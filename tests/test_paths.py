from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowd.base.paths import as_prefix, is_safe, normalize, overlapping, unsafe_reason, within

segment = st.text(alphabet="abcxyz._-", min_size=1, max_size=5).filter(lambda s: s not in (".", ".."))
rel_path = st.lists(segment, min_size=1, max_size=5).map("/".join)
messy = st.tuples(st.sampled_from(["", "./", "././", " "]), rel_path, st.sampled_from(["", "/", "//", " "]))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("src/a", "src/a"),
        ("./src/a/", "src/a"),
        ("././src/a//", "src/a"),
        ("  src\\a\\b\\ ", "src/a/b"),
        ("./", ""),
        ("", ""),
        (".", "."),
        ("/abs/", "/abs"),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


@pytest.mark.parametrize(
    ("path", "prefix", "inside"),
    [
        ("src/a", "src/a", True),
        ("src/a/b.py", "src/a", True),
        ("src/ab", "src/a", False),
        ("src/ab/c", "src/a/", False),
        ("src", "src/a", False),
        ("./src/a/x", "src/a/", True),
        ("src/a/x", "src/a/*", True),
        ("src/a/x/y", "src/a/**", True),
        ("src/ab", "src/a/**", False),
        ("anything", "", True),
        ("anything", "**", True),
        (".", ".", True),
        ("src/a", ".", False),
    ],
)
def test_within_is_segment_aware(path: str, prefix: str, inside: bool) -> None:
    assert within(path, prefix) is inside


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [("src/a", "src/a/b", True), ("src/a/b", "src/a", True), ("src/a", "src/ab", False), ("x", "y", False)],
)
def test_overlapping(a: str, b: str, expected: bool) -> None:
    assert overlapping(a, b) is expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("src/a", None),
        ("src/a..b", None),
        ("/etc/passwd", "absolute"),
        ("\\server\\x", "absolute"),
        ("C:/x", "absolute"),
        ("c:x", "absolute"),
        ("../x", "'..'"),
        ("src/../../x", "'..'"),
        ("", "empty"),
        ("./", "empty"),
        ("  ", "empty"),
        ("**", "empty"),
        (".", "'.'"),
    ],
)
def test_unsafe_reason(raw: str, reason: str | None) -> None:
    found = unsafe_reason(raw)
    if reason is None:
        assert found is None and is_safe(raw)
    else:
        assert found is not None and reason in found and not is_safe(raw)


def test_glob_tails_read_as_prefixes() -> None:
    assert as_prefix("src/x/*") == "src/x"
    assert as_prefix("src/x/**/") == "src/x"
    assert as_prefix("src/x.py") == "src/x.py"


@given(st.text(max_size=30))
def test_normalize_is_idempotent(raw: str) -> None:
    assert normalize(normalize(raw)) == normalize(raw)


@given(messy)
def test_normalize_undoes_decoration(parts: tuple[str, str, str]) -> None:
    lead, path, trail = parts
    assert normalize(lead + path + trail) == path


@given(rel_path, rel_path)
def test_within_matches_segment_prefix(prefix: str, rest: str) -> None:
    assert within(f"{prefix}/{rest}", prefix)
    assert within(prefix, prefix)
    # Glueing text onto the last segment never lands inside.
    assert not within(prefix + "q", prefix)


@given(rel_path, rel_path)
def test_overlapping_is_symmetric(a: str, b: str) -> None:
    assert overlapping(a, b) == overlapping(b, a)
    assert overlapping(a, b) == (within(a, b) or within(b, a))


@given(rel_path)
def test_relative_segment_paths_are_safe(path: str) -> None:
    assert is_safe(path)
    assert not is_safe("/" + path)
    assert not is_safe(path + "/../x")
