from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowd.base.paths import normalize, overlapping
from flowd.plan.validate import violations
from tests.plan.helpers import plan, story

CASES: list[tuple[str, list[dict[str, Any]], list[tuple[str, str]]]] = [
    ("valid", [story("a"), story("b", dependsOn=["a"])], []),
    (
        "duplicate id",
        [story("a"), story("a", owned=["lib"])],
        [("plan.duplicateId", "duplicate story id 'a'")],
    ),
    (
        "bad id",
        [
            story("Api", owned=["a"]),
            story("-x", owned=["b"]),
            story("a_b", owned=["c"]),
            story("ok--", owned=["d"]),
        ],
        [
            ("plan.badId", "story id 'Api' is not kebab-case"),
            ("plan.badId", "story id '-x' is not kebab-case"),
            ("plan.badId", "story id 'a_b' is not kebab-case"),
        ],
    ),
    ("owns nothing", [story("a", owned=[])], [("plan.ownsNothing", "story 'a' owns no paths")]),
    (
        "depends on itself",
        [story("a", dependsOn=["a"])],
        [("plan.dependsOnItself", "story 'a' depends on itself")],
    ),
    (
        "depends on unknown",
        [story("a", dependsOn=["zz"])],
        [("plan.unknownDependency", "story 'a' depends on unknown story 'zz'")],
    ),
    (
        "owns and shares",
        [story("a", owned=["src/a/"], sharedReadOnly=["./src/a/models.py"])],
        [
            (
                "plan.ownsShared",
                "story 'a' both owns 'src/a/' and declares './src/a/models.py' shared read-only",
            )
        ],
    ),
    (
        "overlap",
        [story("a", owned=["./src/a/"]), story("b", owned=["src/a/b.py"])],
        [("plan.overlap", "stories 'a' and 'b' both own 'src/a' / 'src/a/b.py'")],
    ),
    ("no overlap across a segment", [story("a", owned=["src/a"]), story("b", owned=["src/ab"])], []),
    (
        "cycle",
        [story("a", dependsOn=["b"]), story("b", dependsOn=["c"]), story("c", dependsOn=["a"])],
        [("plan.cycle", "dependency cycle: a -> b -> c -> a")],
    ),
    (
        "unsafe paths",
        [story("a", owned=["/etc", "../up", ""], sharedReadOnly=["C:/x"], readFirst=["./"])],
        [
            (
                "plan.unsafePath",
                "story 'a' owned path '/etc' is absolute; use a path relative to the repository root",
            ),
            (
                "plan.unsafePath",
                "story 'a' owned path '../up' contains '..'; name a path inside the repository",
            ),
            (
                "plan.unsafePath",
                "story 'a' owned path '' is empty; name a file or folder relative to the repository root",
            ),
            (
                "plan.unsafePath",
                "story 'a' sharedReadOnly path 'C:/x' is absolute; use a path relative to the repository root",
            ),
            (
                "plan.unsafePath",
                "story 'a' readFirst path './' is empty; name a file or folder relative to the repository root",
            ),
        ],
    ),
]


@pytest.mark.parametrize(("stories", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_each_rule(stories: list[dict[str, Any]], expected: list[tuple[str, str]]) -> None:
    found = violations(plan(*stories))
    assert [(v.code, v.message) for v in found] == expected


def test_original_example_gives_exactly_two() -> None:
    found = violations(plan(story("a", owned=["src/a"], dependsOn=["a"]), story("b", owned=["src/a"])))
    assert [v.message for v in found] == [
        "story 'a' depends on itself",
        "stories 'a' and 'b' both own 'src/a' / 'src/a'",
    ]


def test_every_violation_is_reported_at_once() -> None:
    found = violations(
        plan(
            story("a", dependsOn=["b", "ghost"]),
            story("b", dependsOn=["a"], owned=["src/a/inner"]),
            story("b", owned=[]),
            story("Bad", owned=["/abs"], sharedReadOnly=["/abs"]),
        )
    )
    codes = [v.code for v in found]
    assert codes == [
        "plan.unknownDependency",
        "plan.duplicateId",
        "plan.ownsNothing",
        "plan.badId",
        "plan.unsafePath",
        "plan.unsafePath",
        "plan.overlap",
        "plan.cycle",
    ]
    assert found[-1].message == "dependency cycle: a -> b -> a"
    assert found[0].story == "a" and found[0].field == "dependsOn" and found[0].item == 1


def test_bad_epic_id_is_reported() -> None:
    found = violations(plan(story("a"), epic_id="My Epic"))
    assert [v.code for v in found] == ["plan.badEpicId"]


def test_two_separate_cycles_are_both_reported() -> None:
    found = violations(
        plan(
            story("a", dependsOn=["b"]),
            story("b", dependsOn=["a"]),
            story("c", dependsOn=["d"]),
            story("d", dependsOn=["c"]),
        )
    )
    assert [v.message for v in found] == ["dependency cycle: a -> b -> a", "dependency cycle: c -> d -> c"]


def test_long_chain_does_not_hit_the_recursion_limit() -> None:
    n = 3000
    stories = [story(f"s{i}", dependsOn=[f"s{i + 1}"] if i + 1 < n else ["s0"]) for i in range(n)]
    found = violations(plan(*stories))
    assert len(found) == 1 and found[0].code == "plan.cycle"
    assert found[0].message.startswith("dependency cycle: s0 -> s1 -> ") and found[0].message.endswith(
        "-> s0"
    )


owned_entries = st.lists(
    st.lists(st.sampled_from(["a", "ab", "b", "a-b"]), min_size=1, max_size=3)
    .map("/".join)
    .map(lambda p: p + ("/" if len(p) % 2 else "")),
    min_size=1,
    max_size=3,
)


@given(st.lists(owned_entries, min_size=1, max_size=6))
def test_overlaps_match_the_pairwise_definition(owned: list[list[str]]) -> None:
    p = plan(*[story(f"s{i}", owned=o) for i, o in enumerate(owned)])
    expected = [
        f"stories 's{i}' and 's{j}' both own '{normalize(pa)}' / '{normalize(pb)}'"
        for i in range(len(owned))
        for j in range(i + 1, len(owned))
        for pa in owned[i]
        for pb in owned[j]
        if overlapping(pa, pb)
    ]
    assert [v.message for v in violations(p) if v.code == "plan.overlap"] == expected
