"""The merge train's rules as tables (flowd/engine/core/train.py, docs/merging.md).

`World` plays the shell: a candidate's gates are red while it holds (on itself or below it) a story
that is still broken, a culprit sent back is fixed by its revision and enters again, and gate runs
finish in rounds (every run in flight finishes in the round it started: one round = one gate run's
time), so `rounds` reads as the train's time in gate runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from flowd.engine.core.train import (
    Build,
    Cancel,
    Capacity,
    Conflicted,
    Discard,
    Eject,
    Event,
    Flaky,
    Gated,
    Instruction,
    Land,
    MergeTrain,
    Ready,
    Regate,
    Result,
    SendBack,
    Withdrawn,
    auto_concurrency,
    mentions,
    named_stories,
)


@dataclass
class World:
    train: MergeTrain
    broken: set[str] = field(default_factory=set)
    flaky_runs: int = 0  # the first this many gate runs of the run are red whatever they hold
    revise: bool = True  # a culprit comes back fixed (its merge revision) in the next round
    content: dict[int, list[str]] = field(default_factory=dict)
    running: dict[int, int] = field(default_factory=dict)  # cid → the gate it starts at
    landed: list[str] = field(default_factory=list)
    sent_back: list[tuple[str, str]] = field(default_factory=list)
    log: list[Instruction] = field(default_factory=list)
    rounds: int = 0
    runs: int = 0
    returning: list[str] = field(default_factory=list)
    # The stories a red run's output names (the shell's `suspects`): None, none; else these
    # among the candidate's own and those below it (a false lead included, as real output has).
    named: set[str] | None = None

    def feed(self, *events: Event) -> None:
        self.carry_out(self.train.handle(*events))

    def carry_out(self, instructions: list[Instruction]) -> None:
        for step in instructions:
            self.log.append(step)
            if isinstance(step, Build):
                below = self.content[step.base] if step.base is not None else []
                self.content[step.cid] = below + list(step.lanes)
                self.running[step.cid] = 0
            elif isinstance(step, Regate):
                self.running[step.cid] = step.start
            elif isinstance(step, Discard):
                self.running.pop(step.cid, None)
            elif isinstance(step, Land):
                self.landed += step.lanes
            elif isinstance(step, SendBack):
                self.sent_back.append((step.story, step.output))
                if self.revise:
                    self.broken.discard(step.story)
                    self.returning.append(step.story)

    def round(self) -> None:
        self.rounds += 1
        finished = list(self.running.items())
        self.running.clear()
        events: list[Gated] = []
        for cid, start in finished:
            self.runs += 1
            red = [s for s in self.content[cid] if s in self.broken]
            if self.flaky_runs > 0:
                self.flaky_runs -= 1
                events.append(Gated(cid, False, 1000, start, "check", "flake"))
            elif red:
                named = tuple(x for x in self.content[cid] if x in (self.named or set()))
                events.append(
                    Gated(cid, False, 1000, 0, "check", f"red because of {','.join(red)}", suspects=named)
                )
            else:
                events.append(Gated(cid, True, 1000))
        back, self.returning = self.returning, []
        self.feed(*events, *(Ready(s) for s in back))

    def settle(self, limit: int = 200) -> None:
        while (self.running or self.returning) and limit:
            self.round()
            limit -= 1
        assert limit, "the train never settled"


def train(
    deps: dict[str, frozenset[str]] | None = None,
    *,
    max_batch: int = 0,
    concurrency: int = 0,
    gate_retries: int = 1,
) -> MergeTrain:
    return MergeTrain(
        deps=deps or {}, max_batch=max_batch, concurrency=concurrency, gate_retries=gate_retries
    )


def stories(n: int) -> list[str]:
    return [f"s{i}" for i in range(1, n + 1)]


def kinds(world: World, kind: type) -> list[Instruction]:
    return [i for i in world.log if isinstance(i, kind)]


@pytest.mark.parametrize(
    ("name", "n", "broken", "concurrency", "landed_first", "sent_back", "max_runs"),
    [
        # name, stories, broken, mergeConcurrency, lands before any revision, culprits, gate runs
        ("all green", 8, set(), 1, stories(8), [], 1),
        ("one red", 8, {"s6"}, 1, ["s1", "s2", "s3", "s4", "s5", "s7", "s8"], ["s6"], 1 + 2 * 3 + 1 + 1),
        ("two reds", 8, {"s2", "s7"}, 1, ["s1", "s3", "s4", "s5", "s6", "s8"], ["s2", "s7"], 16),
        # Speculation spends gate runs (in parallel) on candidates a red one below throws away.
        ("one red, speculating", 8, {"s1"}, 4, stories(8)[1:], ["s1"], 3 * 8),
    ],
)
def test_a_batch_lands_its_innocent_and_sends_back_its_culprits(
    name: str,
    n: int,
    broken: set[str],
    concurrency: int,
    landed_first: list[str],
    sent_back: list[str],
    max_runs: int,
) -> None:
    world = World(train(concurrency=concurrency), broken=set(broken))
    world.revise = False
    world.feed(*(Ready(s) for s in stories(n)))
    world.settle()
    assert world.landed == landed_first, name
    assert [s for s, _ in world.sent_back] == sent_back
    # Each culprit's own gate output, not its batch's.
    for story, output in world.sent_back:
        assert output == f"red because of {story}"
    assert world.runs <= max_runs, (name, world.runs)
    assert world.train.gate_runs == world.runs
    # Every story merged exactly once, none twice.
    assert len(world.landed) == len(set(world.landed))
    # The culprit comes back fixed: it lands, alone, after the rest.
    for story in sent_back:
        world.broken.discard(story)
        world.feed(Ready(story))
    world.settle()
    assert sorted(world.landed) == sorted(stories(n)) and len(world.landed) == n


@pytest.mark.parametrize("broken", [set(), {"s1"}, {"s5"}, {"s3", "s8"}])
def test_speculation_never_takes_longer(broken: set[str]) -> None:
    rounds = []
    for concurrency in (1, 4):
        world = World(train(concurrency=concurrency), broken=set(broken))
        world.feed(*(Ready(s) for s in stories(4)))
        world.round()
        world.feed(*(Ready(s) for s in stories(8)[4:]))
        world.settle()
        assert sorted(world.landed) == stories(8) and len(world.landed) == 8
        rounds.append(world.rounds)
    assert rounds[1] <= rounds[0], rounds


def test_one_red_in_eight_is_found_in_log_n_gate_runs() -> None:
    world = World(train(concurrency=1), broken={"s6"}, revise=False)
    world.feed(*(Ready(s) for s in stories(8)))
    world.settle()
    bisects = [b for b in kinds(world, Build) if isinstance(b, Build) and b.bisect]
    # 8 → 4+4 → 2+2 → 1+1: three levels, at most two runs each.
    assert world.train.bisections == len(bisects) <= 2 * int(math.log2(8))
    results = kinds(world, Result)
    assert results[0] == Result(1, False, 2000)  # its run and the flaky rerun


def test_a_flaky_red_is_rerun_and_the_batch_lands_without_a_bisection() -> None:
    world = World(train(concurrency=1, gate_retries=1), flaky_runs=1)
    world.feed(*(Ready(s) for s in stories(4)))
    world.settle()
    assert world.landed == stories(4) and world.sent_back == []
    assert kinds(world, Regate) == [Regate(1, 0)]
    assert kinds(world, Flaky) == [Flaky(1, 0, 1)]
    assert world.train.bisections == 0 and world.runs == 2
    assert kinds(world, Result) == [Result(1, True, 2000)]


def test_with_no_retries_a_flake_bisects() -> None:
    world = World(train(concurrency=1, gate_retries=0), flaky_runs=1)
    world.feed(*(Ready(s) for s in stories(4)))
    world.settle()
    # Nothing is really broken: both halves pass and everything lands, in order.
    assert world.landed == stories(4) and world.sent_back == [] and world.train.bisections == 2


def test_a_story_after_its_dependency_in_the_same_batch() -> None:
    deps = {"b": frozenset({"a"}), "c": frozenset({"b"})}
    world = World(train(deps=deps, concurrency=1))
    world.feed(Ready("c"), Ready("x"), Ready("b"), Ready("a"))
    world.settle()
    first = kinds(world, Build)[0]
    assert isinstance(first, Build) and first.lanes == ("x", "a", "b", "c")
    assert world.landed == ["x", "a", "b", "c"]


def test_a_dependent_never_lands_before_its_culprit_dependency() -> None:
    deps = {"b": frozenset({"a"})}
    world = World(train(deps=deps, concurrency=1), broken={"a"}, revise=False)
    world.feed(Ready("a"), Ready("b"), Ready("x"))
    world.settle()
    assert world.sent_back and world.sent_back[0][0] == "a"
    assert "b" not in world.landed and world.train.queue == ["b"]
    world.broken.clear()
    world.feed(Ready("a"))
    world.settle()
    assert world.landed.index("a") < world.landed.index("b")


def test_a_story_arriving_while_a_batch_is_gated_waits_for_the_next_one() -> None:
    world = World(train(concurrency=1))
    world.feed(*(Ready(s) for s in stories(3)))
    world.feed(Ready("late"))
    assert [b.lanes for b in kinds(world, Build) if isinstance(b, Build)] == [("s1", "s2", "s3")]
    world.settle()
    assert [b.lanes for b in kinds(world, Build) if isinstance(b, Build)] == [("s1", "s2", "s3"), ("late",)]
    assert world.landed == [*stories(3), "late"] and world.rounds == 2


def test_with_speculation_a_late_story_is_gated_on_top_of_the_batch_in_flight() -> None:
    world = World(train(concurrency=2))
    world.feed(*(Ready(s) for s in stories(3)))
    world.feed(Ready("late"))
    builds = [b for b in kinds(world, Build) if isinstance(b, Build)]
    assert [(b.lanes, b.base) for b in builds] == [(("s1", "s2", "s3"), None), (("late",), 1)]
    world.settle()
    # Both land in one round: the speed of one gate run.
    assert world.landed == [*stories(3), "late"] and world.rounds == 1


def test_a_red_candidate_discards_only_what_was_built_on_it() -> None:
    world = World(train(concurrency=3, gate_retries=0), broken={"s2"}, revise=False)
    world.feed(Ready("s1"))
    world.feed(Ready("s2"))
    world.feed(Ready("s3"))
    assert [b.base for b in kinds(world, Build) if isinstance(b, Build)] == [None, 1, 2]
    world.round()
    # s1 landed; s2's candidate is red alone: its culprit; s3's (built on it) is discarded and rebuilt.
    assert world.landed == ["s1"] and world.sent_back[0][0] == "s2"
    assert Discard(3) in world.log and Discard(1) not in world.log
    world.settle()
    assert world.landed == ["s1", "s3"]


def test_every_story_red_is_no_worse_than_serial_but_for_the_bisection() -> None:
    n = 16
    world = World(train(concurrency=1), broken=set(stories(n)), revise=False)
    world.feed(*(Ready(s) for s in stories(n)))
    world.settle()
    assert sorted(s for s, _ in world.sent_back) == sorted(stories(n)) and world.landed == []
    # Serial: a red run and its rerun per story. Beyond that only the first bisection's own runs
    # (and its culprit's rerun): after a red batch the train goes one at a time.
    serial = n * 2
    assert world.runs <= serial + world.train.bisections + 1
    assert world.train.bisections <= int(math.log2(n))
    assert world.train.window == 1


def test_a_green_streak_grows_the_window_back() -> None:
    world = World(train(concurrency=1), broken={"s1"}, revise=False)
    world.feed(*(Ready(s) for s in stories(4)))
    world.settle()
    low = world.train.window
    world.feed(*(Ready(f"g{i}") for i in range(8)))
    world.settle()
    assert world.train.window > low


@pytest.mark.parametrize("batch", [1, 3])
def test_merge_batch_bounds_each_batch(batch: int) -> None:
    world = World(train(max_batch=batch, concurrency=1))
    world.feed(*(Ready(s) for s in stories(6)))
    world.settle()
    sizes = [len(b.lanes) for b in kinds(world, Build) if isinstance(b, Build)]
    assert max(sizes) == batch and sum(sizes) == 6 and world.landed == stories(6)


def test_cancel_mid_batch_discards_every_candidate_and_lands_nothing() -> None:
    world = World(train(concurrency=2))
    world.feed(*(Ready(s) for s in stories(3)))
    world.feed(Ready("late"))
    world.feed(Cancel())
    assert kinds(world, Discard) == [Discard(1), Discard(2)]
    world.feed(Gated(1, True), Ready("after"))
    assert world.landed == [] and kinds(world, Land) == [] and world.train.queue == []


def test_cancel_mid_bisect_discards_the_halves() -> None:
    world = World(train(concurrency=2, gate_retries=0), broken={"s3"}, revise=False)
    world.feed(*(Ready(s) for s in stories(4)))
    world.round()  # the batch is red: bisecting, both halves gating
    halves = [b.cid for b in kinds(world, Build) if isinstance(b, Build) and b.bisect]
    assert len(halves) == 2
    world.feed(Cancel())
    assert [d for d in kinds(world, Discard) if isinstance(d, Discard) and d.cid in halves] == [
        Discard(c) for c in halves
    ]
    assert world.landed == []


def test_a_budget_pause_mid_batch_still_lands_the_work_that_is_done() -> None:
    # A paused or halted run launches nothing new, but merging finished work costs nothing: the
    # train lands its batch, and a culprit goes back to its story, whose revision then waits on
    # the budget like any other turn (docs/merging.md).
    world = World(train(concurrency=1), broken={"s2"}, revise=False)
    world.feed(*(Ready(s) for s in stories(3)))
    world.settle()
    assert world.landed == ["s1", "s3"] and [s for s, _ in world.sent_back] == ["s2"]


def test_a_story_withdrawn_mid_batch_takes_its_candidate_down_and_the_rest_is_rebuilt() -> None:
    world = World(train(concurrency=2))
    world.feed(*(Ready(s) for s in stories(3)))
    world.feed(Ready("late"))
    world.feed(Withdrawn("s2"))
    assert Discard(1) in world.log and Discard(2) in world.log
    world.settle()
    assert world.landed == ["s1", "s3", "late"]


def test_a_conflicting_story_is_ejected_and_the_rest_rebuilt_without_it() -> None:
    world = World(train(concurrency=1))
    world.feed(*(Ready(s) for s in stories(3)))
    world.running.pop(1)
    world.feed(Conflicted(1, "s2", "a.py"))
    assert Eject("s2", "a.py") in world.log
    rebuilt = kinds(world, Build)[-1]
    assert isinstance(rebuilt, Build) and rebuilt.lanes == ("s1", "s3")
    world.settle()
    world.feed(Ready("s2"))  # caught up, it enters again
    world.settle()
    assert world.landed == ["s1", "s3", "s2"]


def test_a_story_enters_once_and_a_landed_one_never_again() -> None:
    world = World(train(concurrency=1))
    world.feed(Ready("a"), Ready("a"))
    assert world.train.queue == [] and [b.lanes for b in kinds(world, Build) if isinstance(b, Build)] == [
        ("a",)
    ]
    world.settle()
    world.feed(Ready("a"))
    assert world.train.queue == [] and world.landed == ["a"]


@pytest.mark.parametrize(
    ("free", "gate_ms", "slots"),
    [(0, (), 1), (3, (), 1), (7, (2000,), 4), (3, (100, 200, 300), 1), (2, (2000, 2100), 3), (0, (900,), 2)],
)
def test_auto_concurrency(free: int, gate_ms: tuple[int, ...], slots: int) -> None:
    assert auto_concurrency(free, gate_ms) == slots
    machine = train()
    machine.handle(Capacity(free, gate_ms))
    assert machine.gate_slots == slots


def test_with_more_gate_slots_a_red_batch_is_split_into_as_many_parts() -> None:
    world = World(train(concurrency=4, gate_retries=0), broken={"s7"}, revise=False)
    world.feed(*(Ready(s) for s in stories(8)))
    world.round()  # the batch of 8 is red
    parts = [b.lanes for b in kinds(world, Build) if isinstance(b, Build) and b.bisect]
    assert parts == [("s1", "s2"), ("s3", "s4"), ("s5", "s6"), ("s7", "s8")]
    world.settle()
    assert world.sent_back[0][0] == "s7" and sorted(world.landed) == sorted(set(stories(8)) - {"s7"})
    # 8 -> 4 parts of 2 -> 2 singles: the culprit alone in the third round.
    assert world.rounds <= 4


@pytest.mark.parametrize(
    ("concurrency", "broken", "named", "parts", "rounds"),
    [
        # The red output names the culprit: it is gated last and alone, so it is found in the
        # bisection's first round while the rest lands beneath it.
        (3, {"s4"}, {"s4"}, [("s1", "s2", "s3"), ("s5", "s6"), ("s4",)], 2),
        (2, {"s4"}, {"s4"}, [("s1", "s2", "s3", "s5", "s6"), ("s4",)], 2),
        # Two named, two slots: not both alone; they go last, together (the culprit is found in
        # the fourth round, as with the plain split).
        (2, {"s2"}, {"s2", "s5"}, [("s1", "s3", "s4"), ("s6", "s2", "s5")], 5),
        # A false lead costs rounds, never the verdict.
        (3, {"s4"}, {"s1"}, [("s2", "s3", "s4"), ("s5", "s6"), ("s1",)], 4),
        # Every story named says nothing: the plain split (the culprit found in the third round,
        # what was built on it landing in the fourth).
        (3, {"s4"}, set(stories(6)), [("s1", "s2"), ("s3", "s4"), ("s5", "s6")], 4),
    ],
)
def test_the_stories_a_red_output_names_are_bisected_last_and_alone(
    concurrency: int, broken: set[str], named: set[str], parts: list[tuple[str, ...]], rounds: int
) -> None:
    world = World(
        train(concurrency=concurrency, gate_retries=0), broken=set(broken), revise=False, named=named
    )
    world.feed(*(Ready(s) for s in stories(6)))
    world.round()  # the batch of 6 is red
    assert [b.lanes for b in kinds(world, Build) if isinstance(b, Build) and b.bisect] == parts
    world.settle()
    assert [s for s, _ in world.sent_back] == sorted(broken)
    assert sorted(world.landed) == sorted(set(stories(6)) - broken)
    assert world.rounds == rounds


def test_a_named_story_another_depends_on_keeps_its_place() -> None:
    deps = {"s5": frozenset({"s2"})}
    world = World(train(deps, concurrency=3, gate_retries=0), broken={"s2"}, revise=False, named={"s2", "s6"})
    world.feed(*(Ready(s) for s in stories(6)))
    world.round()
    first = [b.lanes for b in kinds(world, Build) if isinstance(b, Build) and b.bisect]
    assert first == [("s1", "s2", "s3"), ("s4", "s5"), ("s6",)]  # s2 stays before s5; s6 goes last
    world.settle()
    assert [s for s, _ in world.sent_back] == ["s2"]
    assert "s5" not in world.landed  # its dependency was sent back (and never revised here)


def test_a_red_output_names_a_path_only_where_it_stands_as_one() -> None:
    out = "FAILED /w/_epic/src/a.py::test_x - assert 1\nsrc/b.py:12: error\nsee docs/c.md."
    named = ["src/a.py", "src/b.py", "docs/c.md"]
    assert [p for p in named if mentions(out, p, "/w/_epic")] == named
    unnamed = ["a.py", "rc/b.py", "src/b.p", "src/a", "docs/c", "_epic/src/a.py"]
    assert [p for p in unnamed if mentions(out, p, "/w/_epic")] == []
    assert not mentions("src/aa.py, src/a.pyc, xsrc/a.py, lib/src/a.py", "src/a.py")


@pytest.mark.parametrize(
    ("output", "named"),
    [
        ("src/b.py:3: AssertionError", ("b",)),
        ("/w/_train/1/src/c.py:1: error\nsrc/a/x.py failed", ("a", "c")),  # in the candidate's order
        ("3 passed, 1 failed", ()),
        ("src/b.pyc is stale", ()),
    ],
)
def test_the_suspects_are_the_stories_whose_merged_files_the_output_names(
    output: str, named: tuple[str, ...]
) -> None:
    merged = {"a": ["src/a/x.py", "src/a/y.py"], "b": ["src/b.py"], "c": ["src/c.py"], "d": []}
    assert named_stories(output, merged, "/w/_train/1") == named
