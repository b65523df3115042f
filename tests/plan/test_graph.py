from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flowd.plan.graph import (
    critical_path_rank,
    dependencies_of,
    dependents_of,
    launch_order,
    ready,
    wave_of,
    waves,
)
from flowd.plan.model import StoryPlan
from flowd.plan.perimeter import owner_of_path
from flowd.plan.validate import violations
from tests.plan.helpers import plan, story


def diamonds(count: int) -> StoryPlan:
    """`count` diamonds in a chain: top -> left, right -> bottom -> next top; plus two loners."""
    stories: list[dict[str, Any]] = []
    previous: list[str] = []
    for k in range(count):
        stories.append(story(f"top-{k}", dependsOn=previous))
        stories.append(story(f"left-{k}", dependsOn=[f"top-{k}"]))
        stories.append(story(f"right-{k}", dependsOn=[f"top-{k}"]))
        stories.append(story(f"bottom-{k}", dependsOn=[f"left-{k}", f"right-{k}"]))
        previous = [f"bottom-{k}"]
    stories.append(story("loner"))
    stories.append(story("after-all", dependsOn=[f"bottom-{count - 1}", "loner"]))
    return plan(*stories)


def test_thirty_story_diamond_plan_validates_and_waves_are_right() -> None:
    p = diamonds(7)
    assert len(p.stories) == 30
    assert violations(p) == []
    w = waves(p)
    assert w[0] == ["top-0", "loner"]
    assert w[1] == ["left-0", "right-0"]
    assert w[2] == ["bottom-0"]
    assert w[3] == ["top-1"]
    assert w[-2] == ["bottom-6"]
    assert w[-1] == ["after-all"]
    assert len(w) == 7 * 3 + 1
    assert sorted(sid for wave in w for sid in wave) == sorted(p.ids)


def test_cycle_members_and_their_dependents_are_left_out_of_waves() -> None:
    p = plan(
        story("a"), story("b", dependsOn=["c"]), story("c", dependsOn=["b"]), story("d", dependsOn=["b"])
    )
    assert waves(p) == [["a"]]
    assert wave_of(p) == {"a": 1}


dags = st.integers(min_value=1, max_value=25).flatmap(
    lambda n: st.lists(
        st.lists(st.integers(min_value=0, max_value=n), max_size=3),
        min_size=n,
        max_size=n,
    )
)


@given(dags)
def test_waves_are_depth_levels_in_plan_order(raw: list[list[int]]) -> None:
    # Story i may depend only on earlier stories, so the graph is acyclic.
    deps = [[f"s{j}" for j in dict.fromkeys(d) if j < i] for i, d in enumerate(raw)]
    p = plan(*[story(f"s{i}", dependsOn=d) for i, d in enumerate(deps)])
    depth: dict[str, int] = {}
    for i, d in enumerate(deps):
        depth[f"s{i}"] = 1 + max((depth[x] for x in d), default=0)
    expected = [[sid for sid in p.ids if depth[sid] == level] for level in range(1, max(depth.values()) + 1)]
    assert waves(p) == expected


def test_ready_respects_progress_sets_and_plan_order() -> None:
    p = plan(story("a"), story("b"), story("c", dependsOn=["a"]), story("d", dependsOn=["a", "b"]))
    assert ready(p) == ["a", "b"]
    assert ready(p, done={"a"}) == ["b", "c"]
    assert ready(p, done={"a"}, running={"b"}) == ["c"]
    assert ready(p, done={"a", "b"}, failed={"c"}) == ["d"]
    assert ready(p, done={"a"}, failed={"b"}, waiting={"d"}) == ["c"]


def test_dependents_and_dependencies_are_transitive_in_plan_order() -> None:
    p = diamonds(2)
    assert dependents_of(p, "bottom-0") == ["top-1", "left-1", "right-1", "bottom-1", "after-all"]
    assert dependents_of(p, "after-all") == []
    assert dependencies_of(p, "left-1") == ["top-0", "left-0", "right-0", "bottom-0", "top-1"]
    assert dependencies_of(p, "loner") == []
    assert dependencies_of(p, "ghost") == []


def test_owner_of_path_is_the_first_owner_segment_aware() -> None:
    p = plan(story("a", owned=["src/a"]), story("b", owned=["src/ab", "docs/b.md"]))
    assert owner_of_path(p, "src/a/x.py") == "a"
    assert owner_of_path(p, "src/ab/x.py") == "b"
    assert owner_of_path(p, "./docs/b.md") == "b"
    assert owner_of_path(p, "README.md") is None


def test_critical_path_rank_counts_the_longest_chain_of_dependents() -> None:
    p = plan(
        story("short"),
        story("long"),
        story("mid", dependsOn=["long"]),
        story("end", dependsOn=["mid", "short"]),
    )
    assert critical_path_rank(p) == {"short": 2, "long": 3, "mid": 2, "end": 1}
    assert critical_path_rank(p, {"short": 5}) == {"short": 6, "long": 3, "mid": 2, "end": 1}


def test_critical_path_rank_ends_on_a_cycle() -> None:
    p = plan(story("a", dependsOn=["b"]), story("b", dependsOn=["a"]))
    assert set(critical_path_rank(p)) == {"a", "b"}


def test_launch_order_puts_the_longest_chain_first_then_plan_order() -> None:
    p = plan(story("short"), story("long"), story("other"), story("mid", dependsOn=["long"]))
    rank = critical_path_rank(p)
    assert launch_order(p, ["short", "other", "long"], rank) == ["long", "short", "other"]
    assert launch_order(p, ["other", "short"], rank) == ["short", "other"]
