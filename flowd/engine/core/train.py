"""The merge train as a state machine: events in, instructions out, no I/O (docs/merging.md).

Stories whose work is done enter with `Ready` (the one entry point: an approval, or anything else
that must come first, simply calls it later). The train merges them onto *candidates*: a
candidate is a list of stories merged in order (each its own merge commit) onto a base, and the
epic gates run once on it. Candidates form a chain: the first builds on the epic head, each next
one on the one before it (speculation), at most `concurrency` gating at once.

Rules:
- A new batch takes the queue in readiness order, a story after every dependency it has in the
  batch (dependency order, then readiness), up to the window; a story whose dependency is neither
  landed nor in the chain waits in the queue.
- A red gate runs again up to `gateRetries` times from that gate on (engine/core/flaky.py); green
  on a rerun is flaky: the candidate passed. Bisection halves of two or more are not rerun (a
  flake only splits them further); a story alone is, before it is blamed.
- Candidates land in chain order, only green ones: the epic moves to a candidate's tip only once
  every candidate before it has landed. Each story lands with its own merge commit.
- A red candidate at the front discards every candidate built on it (their stories go back to the
  queue's front). One story alone: the culprit, sent back for a merge revision with its own gate
  output. More: bisected, the first half on the epic and the second on the first (with k gate
  slots, k parts at once), so the innocent land and the culprits are found in O(log n) gate runs.
  The stories the red output names (the shell's `suspects`: a story whose merged files it
  mentions) are gated last, each alone where the slots allow, so a named culprit is found in the
  first round of the bisection while the others land beneath it; a story that another of the
  candidate depends on keeps its place.
- The window (stories per batch, at most `mergeBatch`, 16 for auto) drops to one after a red batch
  and doubles after each landing: a red streak is one at a time (no worse than serial by more than
  the first bisection's own runs), a green one grows back.
- A story leaving (cancelled, failed) takes its candidate and what was built on it down; a cancel
  discards every candidate. A story that conflicts while its candidate is built is ejected (its
  shell catches it up and it enters again); the rest of the candidate is rebuilt without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from flowd.engine.core.flaky import Failed, Rerun, after_gate_run

AUTO_BATCH = 16
AUTO_CONCURRENCY_CAP = 4
# Below this median epic gate time, speculation saves less than its extra worktrees cost.
SPECULATE_FROM_MS = 500.0


# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """`story`'s work is done (and approved, where approval applies): it may merge."""

    story: str


@dataclass(frozen=True)
class Withdrawn:
    """`story` no longer waits to merge (its task was cancelled, or it failed)."""

    story: str


@dataclass(frozen=True)
class Gated:
    """The epic gates ran on candidate `cid` (from the gate it was told to start at): `ok`, or red
    at gate index `gate` with that command's output."""

    cid: int
    ok: bool
    duration_ms: int = 0
    gate: int = 0
    command: str = ""
    output: str = ""
    timed_out: bool = False
    suspects: tuple[str, ...] = ()  # red: the candidate's stories whose merged files `output` names


@dataclass(frozen=True)
class Conflicted:
    """Building candidate `cid`, merging `story` conflicted (`detail` names the paths)."""

    cid: int
    story: str
    detail: str


@dataclass(frozen=True)
class Capacity:
    """What auto concurrency decides from: lanes free, and the epic gates' past run times."""

    free_lanes: int
    gate_ms: tuple[int, ...] = ()


@dataclass(frozen=True)
class Cancel:
    """The run is cancelled: discard every candidate."""


Event = Ready | Withdrawn | Gated | Conflicted | Capacity | Cancel

# -- instructions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """Build candidate `cid`: `lanes` merged in order onto `base` (a candidate's tip; None: the epic
    head), then run the epic gates on it. `bisect`: a half of a red batch (`MergeBisect`), else
    a new batch (`MergeBatchStarted`)."""

    cid: int
    batch: int
    lanes: tuple[str, ...]
    base: int | None
    bisect: bool = False


@dataclass(frozen=True)
class Regate:
    """Run candidate `cid`'s gates again from gate index `start` (the flaky rerun)."""

    cid: int
    start: int


@dataclass(frozen=True)
class Flaky:
    """Gate index `gate` of candidate `cid` was green after `attempts` red runs (`GateFlaky`)."""

    cid: int
    gate: int
    attempts: int


@dataclass(frozen=True)
class Result:
    """The verdict on a batch's own candidate (`MergeBatchResult`)."""

    batch: int
    ok: bool
    duration_ms: int


@dataclass(frozen=True)
class Land:
    """Move the epic to candidate `cid`'s tip: each of `lanes` is merged (its own `StoryMerged`)."""

    cid: int
    batch: int
    lanes: tuple[str, ...]


@dataclass(frozen=True)
class Discard:
    """Stop candidate `cid`'s gates if they run and remove its worktree."""

    cid: int


@dataclass(frozen=True)
class SendBack:
    """`story` is a culprit: red alone on the epic. It goes back for a merge revision with its own
    gate output; `bisected`: found by bisecting batch `batch`."""

    story: str
    batch: int
    gate: str
    output: str
    bisected: bool


@dataclass(frozen=True)
class Eject:
    """`story` conflicted with the stories ahead of it: catch it up, then it enters again."""

    story: str
    detail: str


Instruction = Build | Regate | Flaky | Result | Land | Discard | SendBack | Eject

CandidateState = Literal["pending", "gating", "green", "red"]


@dataclass
class Candidate:
    cid: int
    batch: int
    lanes: list[str]
    bisect: bool
    state: CandidateState = "pending"
    red_runs: dict[int, int] = field(default_factory=dict)  # gate index → red runs so far
    rerun_from: int | None = None  # the gate a rerun started at, until it is decided
    duration_ms: int = 0
    command: str = ""
    output: str = ""
    suspects: tuple[str, ...] = ()


def auto_concurrency(free_lanes: int, gate_ms: tuple[int, ...]) -> int:
    """`mergeConcurrency = 0`: one candidate until a first run says how long gates take; then,
    when they take long enough for speculation to pay, one plus one per free lane, at least two
    and at most four."""
    if not gate_ms:
        return 1
    ordered = sorted(gate_ms)
    if ordered[len(ordered) // 2] < SPECULATE_FROM_MS:
        return 1
    # Two at least: a bisection's halves, or the next candidate, wait on no lane to free up.
    return min(AUTO_CONCURRENCY_CAP, max(2, 1 + max(0, free_lanes)))


@dataclass
class MergeTrain:
    """`deps`: each story's dependencies in the plan; `order`: plan order (ties)."""

    deps: Mapping[str, frozenset[str]]
    max_batch: int = 0  # `mergeBatch`: 0 auto
    concurrency: int = 0  # `mergeConcurrency`: 0 auto
    gate_retries: int = 1
    first_batch: int = 1  # batch numbers go on from a resumed run's
    queue: list[str] = field(default_factory=list)  # ready, in readiness order
    chain: list[Candidate] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    out: set[str] = field(default_factory=set)  # sent back or ejected: entered, not landed, not queued
    window: int = 0
    capacity: Capacity = field(default_factory=lambda: Capacity(free_lanes=0))
    cancelled: bool = False
    gate_runs: int = 0  # gate runs that came back (not those discarded while they ran)
    bisections: int = 0
    _next_cid: int = 1
    _next_batch: int = 0

    def __post_init__(self) -> None:
        self.window = self.limit
        self._next_batch = self.first_batch

    @property
    def limit(self) -> int:
        return self.max_batch or AUTO_BATCH

    @property
    def gate_slots(self) -> int:
        if self.concurrency:
            return self.concurrency
        return auto_concurrency(self.capacity.free_lanes, self.capacity.gate_ms)

    def busy(self, story: str) -> bool:
        """Whether `story` is queued or in a candidate."""
        return story in self.queue or any(story in c.lanes for c in self.chain)

    # -- the one door ----------------------------------------------------------------------------
    def handle(self, *events: Event) -> list[Instruction]:
        out: list[Instruction] = []
        for event in events:
            if isinstance(event, Ready):
                if not self.cancelled and not self.busy(event.story) and event.story not in self.landed:
                    self.out.discard(event.story)
                    self.queue.append(event.story)
            elif isinstance(event, Withdrawn):
                out += self._withdraw(event.story)
            elif isinstance(event, Gated):
                out += self._gated(event)
            elif isinstance(event, Conflicted):
                out += self._conflicted(event)
            elif isinstance(event, Capacity):
                self.capacity = event
            else:
                out += self._cancel()
        if not self.cancelled:
            out += self._advance()
        return out

    # -- what came back --------------------------------------------------------------------------
    def _find(self, cid: int) -> Candidate | None:
        return next((c for c in self.chain if c.cid == cid), None)

    def _gated(self, event: Gated) -> list[Instruction]:
        candidate = self._find(event.cid)
        if candidate is None or candidate.state != "gating":
            return []  # discarded meanwhile
        out: list[Instruction] = []
        self.gate_runs += 1
        candidate.duration_ms += event.duration_ms
        start = candidate.rerun_from
        if start is not None and (event.ok or event.gate > start):
            out.append(Flaky(candidate.cid, start, candidate.red_runs[start]))
            candidate.rerun_from = None
        if event.ok:
            candidate.state = "green"
        else:
            red_before = candidate.red_runs.get(event.gate, 0)
            # A bisection half of two or more is not rerun: a flake there only splits it further,
            # and each story is rerun alone before it is blamed.
            retries = self.gate_retries if not candidate.bisect or len(candidate.lanes) == 1 else 0
            step = after_gate_run(False, red_before, retries, timed_out=event.timed_out)
            candidate.red_runs[event.gate] = red_before + 1
            if isinstance(step, Rerun):
                candidate.rerun_from = event.gate
                return [*out, Regate(candidate.cid, event.gate)]
            assert isinstance(step, Failed)
            candidate.state = "red"
            candidate.command, candidate.output = event.command, event.output
            candidate.suspects = event.suspects
        if not candidate.bisect:
            out.append(Result(candidate.batch, candidate.state == "green", candidate.duration_ms))
        return out

    def _conflicted(self, event: Conflicted) -> list[Instruction]:
        candidate = self._find(event.cid)
        if candidate is None:
            return []
        out = self._drop_from(self.chain.index(candidate), keep_out=event.story)
        self.out.add(event.story)
        return [*out, Eject(event.story, event.detail)]

    def _withdraw(self, story: str) -> list[Instruction]:
        if story in self.queue:
            self.queue.remove(story)
        self.out.discard(story)
        for index, candidate in enumerate(self.chain):
            if story in candidate.lanes:
                return self._drop_from(index, keep_out=story)
        return []

    def _cancel(self) -> list[Instruction]:
        self.cancelled = True
        out: list[Instruction] = [Discard(c.cid) for c in self.chain if c.state != "pending"]
        self.chain.clear()
        self.queue.clear()
        return out

    def _drop_from(self, index: int, keep_out: str | None = None) -> list[Instruction]:
        """Discard the candidates from `index` on; their stories (but `keep_out`) go back to the
        queue's front, in chain order."""
        dropped = self.chain[index:]
        del self.chain[index:]
        back = [s for c in dropped for s in c.lanes if s != keep_out]
        self.queue[:0] = back
        return [Discard(c.cid) for c in dropped if c.state != "pending"]

    # -- moving on -------------------------------------------------------------------------------
    def _advance(self) -> list[Instruction]:
        out: list[Instruction] = []
        while self.chain and self.chain[0].state in ("green", "red"):
            front = self.chain[0]
            if front.state == "green":
                self.chain.pop(0)
                self.landed += front.lanes
                self.window = min(self.limit, self.window * 2)
                out.append(Land(front.cid, front.batch, tuple(front.lanes)))
            else:
                out += self._red_front(front)
        out += self._start_pending()
        out += self._form_batches()
        return out

    def _red_front(self, front: Candidate) -> list[Instruction]:
        out = self._drop_from(1)
        self.chain.pop(0)
        out.append(Discard(front.cid))
        if not front.bisect:
            self.window = 1
        if len(front.lanes) == 1:
            story = front.lanes[0]
            self.out.add(story)
            out.append(SendBack(story, front.batch, front.command, front.output, front.bisect))
            return out
        self.chain[:0] = [
            self._candidate(front.batch, part, bisect=True) for part in self._bisect_parts(front)
        ]
        return out

    def _bisect_parts(self, front: Candidate) -> list[list[str]]:
        """Halves with one gate slot; with more, as many parts as slots, gated at once (each on
        the one before it): the culprit is cornered in log_k n rounds instead of log_2 n. The
        suspects the red output named go last, alone while the slots allow: a named culprit is
        then found in this round, on top of the others landing."""
        slots = min(len(front.lanes), max(2, self.gate_slots))
        named = self._movable_suspects(front)
        if not named:
            return _split(front.lanes, slots)
        rest = [s for s in front.lanes if s not in named]
        if len(named) < slots:
            return [*_split(rest, slots - len(named)), *([s] for s in named)]
        return _split([*rest, *named], slots)

    def _movable_suspects(self, front: Candidate) -> list[str]:
        """The suspects that may go after every other story of the candidate: none of them
        depends on it (dependency order stays). None when every story is named (no hint)."""
        lanes = set(front.lanes)
        needed = {d for s in front.lanes for d in self._needs(s, lanes)}
        named = [s for s in front.lanes if s in front.suspects and s not in needed]
        return named if len(named) < len(front.lanes) else []

    def _needs(self, story: str, among: set[str]) -> set[str]:
        """`story`'s dependencies among `among`, through any chain of them."""
        found: set[str] = set()
        todo = [story]
        while todo:
            for dep in self.deps.get(todo.pop(), frozenset()):
                if dep in among and dep not in found:
                    found.add(dep)
                    todo.append(dep)
        return found

    def _candidate(self, batch: int, lanes: list[str], *, bisect: bool) -> Candidate:
        candidate = Candidate(self._next_cid, batch, list(lanes), bisect)
        self._next_cid += 1
        return candidate

    def _gating(self) -> int:
        return sum(1 for c in self.chain if c.state == "gating")

    def _start_pending(self) -> list[Instruction]:
        out: list[Instruction] = []
        for index, candidate in enumerate(self.chain):
            if candidate.state != "pending":
                continue
            if self._gating() >= self.gate_slots:
                break
            out.append(self._start(index))
        return out

    def _start(self, index: int) -> Build:
        candidate = self.chain[index]
        candidate.state = "gating"
        if candidate.bisect:
            self.bisections += 1
        base = self.chain[index - 1].cid if index > 0 else None
        return Build(candidate.cid, candidate.batch, tuple(candidate.lanes), base, candidate.bisect)

    def _form_batches(self) -> list[Instruction]:
        out: list[Instruction] = []
        # Only behind candidates that all started: a pending one (a bisection half waiting for a
        # slot) would otherwise be overtaken by a batch built on top of it.
        while (
            self.queue and self._gating() < self.gate_slots and all(c.state != "pending" for c in self.chain)
        ):
            lanes = self._take()
            if not lanes:
                break
            self.chain.append(self._candidate(self._next_batch, lanes, bisect=False))
            self._next_batch += 1
            out.append(self._start(len(self.chain) - 1))
        return out

    def _take(self) -> list[str]:
        """The next batch: readiness order, each story after its dependencies (dependency order,
        then readiness), none whose dependency is neither landed nor ahead of it."""
        ahead = {s for c in self.chain for s in c.lanes}
        taken: list[str] = []
        progress = True
        while progress and len(taken) < self.window:
            progress = False
            for story in self.queue:
                if story in taken or len(taken) >= self.window:
                    continue
                waiting = self.deps.get(story, frozenset()) - set(self.landed) - ahead - set(taken)
                # A dependency the train never saw merged before this run: not waited for.
                if any(d in self.out or d in self.queue for d in waiting):
                    continue
                taken.append(story)
                progress = True
                break  # again from the queue's head: a dependency taken may free a story ahead
        for story in taken:
            self.queue.remove(story)
        return taken


def _split(lanes: list[str], parts: int) -> list[list[str]]:
    """`lanes` in order, cut into `parts` parts as even as can be (the first ones longer)."""
    size, extra = divmod(len(lanes), parts)
    pieces, start = [], 0
    for number in range(parts):
        end = start + size + (1 if number < extra else 0)
        pieces.append(lanes[start:end])
        start = end
    return [piece for piece in pieces if piece]


def named_stories(
    output: str, merged: Mapping[str, Sequence[str]], root: str | None = None
) -> tuple[str, ...]:
    """The candidate's stories (in `merged`'s order: story → the files its merge brought) that a
    red gate's `output` names: the bisection's `suspects`. `root`: where the gates ran."""
    return tuple(story for story, paths in merged.items() if any(mentions(output, p, root) for p in paths))


def mentions(output: str, path: str, root: str | None = None) -> bool:
    """Whether `output` names the repository path `path` as a whole path: `src/a.py` in
    `src/a.py:12` or `<root>/src/a.py`, not in `src/aa.py`, `xsrc/a.py`, `lib/src/a.py` or
    `src/a.pyc`."""
    if root is not None:
        output = output.replace(f"{root}/", "")
    return re.search(rf"(?<![\w./-]){re.escape(path)}(?![\w/-]|\.\w)", output) is not None
