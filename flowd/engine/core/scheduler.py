"""The scheduler as a state machine: events in, instructions out, no I/O.

`Scheduler.handle(*events)` is the only way its state changes (the shape of dask/distributed's
`WorkerState.handle_stimulus`). The shell (`engine/runner.py`) turns what happened (a poll for
free slots, a story task that finished, one it stopped, a signal) into events and carries out the
instructions: launch a story task, mark a story waiting, say something, report the budget, stop
every running story, end the run.

Rules (docs/architecture.md: one run):
- Ready stories (every dependency done) launch by critical-path rank, plan order breaking ties,
  up to min(concurrency, coder slots) at once (at least one slot). A story waiting in the merge
  train holds no slot (`LaneFreed`): its lane's work is done (docs/merging.md).
- A story whose tasks are done (it is judged and merged next: `TasksDone`) or that waits in the
  merge train, with a dependent that needs nothing else to be ready (its other dependencies
  done, or as far as this one), has that dependent's lane made ahead (`MakeAhead`: its worktree
  at the epic's green head, its planner's agent started), the highest-ranked one, once: it
  launches as any story does when its dependencies are done, its start no longer waiting for a
  worktree and an agent (docs/performance.md "A dependent's lane made ahead").
- Nothing launches once the run is halted, failed fast or cancelled; a spent epic budget halts the
  run when a story would launch.
- A story that did not finish puts its transitive dependents in `waiting for <id>`; a failed one
  with failFast stops every running story and holds the rest.
- A story's `halt` halts the run: running stories finish, nothing new starts, the rest wait.
- A cancel stops every running story; the run ends `cancelled`, or `halted` when the cancel came
  from a broken trace.
- Pauses (docs/answers.md, rules in engine/core/pause.py): a paused story is neither running nor
  finished, so it holds no slot and its dependents simply are not ready; a paused run (the epic
  budget, with `budget` in `pauseOn`) launches nothing. A run whose only stories left are paused
  does not end: it waits for an `Answered` (or a cancel).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from flowd.engine.core.outcome import OutcomeStatus
from flowd.events.model import RunOutcome
from flowd.plan.graph import dependents_of, launch_order, ready
from flowd.plan.model import StoryPlan

# -- events --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Poll:
    """Time to launch what can launch: how many coder slots the roster has, the budget's verdict,
    and whether launching is allowed at all (not while a cancel the shell has not fed yet is
    pending: then the poll only settles an idle run)."""

    coder_slots: int
    budget_spent: str | None = None
    may_launch: bool = True


@dataclass(frozen=True)
class StoryFinished:
    """A story task returned its outcome."""

    story: str
    status: OutcomeStatus
    halt: str | None = None


@dataclass(frozen=True)
class StoryStopped:
    """A story task the shell stopped ended: `cancelled`, or what it returned meanwhile."""

    story: str
    status: OutcomeStatus


@dataclass(frozen=True)
class Cancelled:
    """A signal, or a trace that can no longer be written (`broken` says why)."""

    broken: str | None = None


@dataclass(frozen=True)
class Paused:
    """A story (or, with `story` None, the whole run) waits on a person for `reason`.

    `stopped`: the running story task that ended because of it; `told`: already asked (a pause a
    killed run left in the trace), so no `AskPerson`."""

    reason: str
    story: str | None = None
    stopped: str | None = None
    detail: str = ""
    told: bool = False


@dataclass(frozen=True)
class Answered:
    """The person answered the pause of `story` (None: the run's): go on, or stop."""

    story: str | None
    go_on: bool


@dataclass(frozen=True)
class LaneFreed:
    """`story`'s work is done and it waits in the merge train (docs/merging.md): its task still
    runs, but it no longer holds a lane (`freed` False: sent back to work, it holds one again)."""

    story: str
    freed: bool = True


@dataclass(frozen=True)
class TasksDone:
    """`story`'s tasks are done: its judge and the merge train come next (a judge's findings or a
    red merge may still send it back to work)."""

    story: str


Event = Poll | StoryFinished | StoryStopped | Cancelled | Paused | Answered | LaneFreed | TasksDone

# -- instructions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    story: str


@dataclass(frozen=True)
class MakeAhead:
    """Make `story`'s lane ahead of its launch: its last dependencies have their tasks done or
    wait in the merge train (engine/ahead.py)."""

    story: str


@dataclass(frozen=True)
class MarkWaiting:
    story: str
    reason: str


@dataclass(frozen=True)
class Say:
    message: str


@dataclass(frozen=True)
class ReportBudget:
    """The epic budget halted the run: report `BudgetExceeded` (once per run)."""


@dataclass(frozen=True)
class StopAll:
    """Cancel every running story task and feed back a `StoryStopped` for each."""


@dataclass(frozen=True)
class End:
    outcome: RunOutcome
    reason: str | None = None


@dataclass(frozen=True)
class AskPerson:
    """Record the pause (`StoryPaused`) with its question: `story` None is the whole run."""

    story: str | None
    reason: str
    detail: str


Instruction = Launch | MakeAhead | MarkWaiting | Say | ReportBudget | StopAll | End | AskPerson


@dataclass
class Scheduler:
    plan: StoryPlan
    rank: Mapping[str, float]
    concurrency: int
    fail_fast: bool
    pause_on: frozenset[str] = frozenset()
    statuses: dict[str, OutcomeStatus] = field(default_factory=dict)
    running: list[str] = field(default_factory=list)
    merging: set[str] = field(default_factory=set)  # running, but in the merge train: no lane held
    waiting: dict[str, str] = field(default_factory=dict)
    halted: str | None = None
    failed_fast: str | None = None
    cancelled: Cancelled | None = None
    stopping: bool = False
    ended: End | None = None
    last_summary: str = ""
    paused: dict[str, str] = field(default_factory=dict)  # story → why it waits on a person
    run_paused: str | None = None  # why the whole run waits on a person (the epic budget)
    ahead: set[str] = field(default_factory=set)  # stories whose lane was made ahead
    tasks_done: set[str] = field(default_factory=set)  # running, its tasks done (`TasksDone`)

    def handle(self, *events: Event) -> list[Instruction]:
        """Apply `events` in order; the instructions they call for, in order."""
        out: list[Instruction] = []
        for event in events:
            if isinstance(event, Poll):
                out += self._poll(event)
            elif isinstance(event, StoryFinished):
                out += self._finished(event)
            elif isinstance(event, StoryStopped):
                out += self._stopped(event)
            elif isinstance(event, Paused):
                out += self._paused(event)
            elif isinstance(event, Answered):
                out += self._answered(event)
            elif isinstance(event, TasksDone):
                if event.story in self.running:
                    self.tasks_done.add(event.story)
                    out += self._make_ahead(event.story)
            elif isinstance(event, LaneFreed):
                if event.freed and event.story in self.running:
                    self.merging.add(event.story)
                    out += self._make_ahead(event.story)
                else:
                    self.merging.discard(event.story)
            else:
                out += self._cancel(event)
        # After the whole batch: stories finishing together are all recorded before failFast stops
        # the others.
        if self.failed_fast is not None and self.running and not self.stopping:
            self.stopping = True
            out.append(StopAll())
        return out

    # -- launching ------------------------------------------------------------------------------
    def _poll(self, poll: Poll) -> list[Instruction]:
        if self.ended is not None or self.cancelled is not None:
            return []
        out: list[Instruction] = []
        if poll.may_launch and self.halted is None and self.failed_fast is None and self.run_paused is None:
            out += self._launch(poll)
        if not self.running and (self._stopping_for_good or not (self.paused or self.run_paused)):
            out += self._settle()
        return out

    def _launch(self, poll: Poll) -> list[Instruction]:
        done = {s for s, status in self.statuses.items() if status == "done"}
        not_done = set(self.statuses) - done
        ready_ids = ready(self.plan, done, not_done, {**self.waiting, **self.paused}, self.running)
        if not ready_ids:
            return []
        slots = min(self.concurrency, max(1, poll.coder_slots))
        free = max(0, slots - len(self.running) + len(self.merging))
        chosen = launch_order(self.plan, ready_ids, self.rank)[:free]
        if chosen and poll.budget_spent is not None:
            if "budget" in self.pause_on:
                return [ReportBudget(), *self._paused(Paused("budget", detail=poll.budget_spent))]
            self.halted = poll.budget_spent
            return [ReportBudget()]
        self.running += chosen
        out: list[Instruction] = [Launch(story) for story in chosen]
        left = len(ready_ids) - free
        if left > 0:
            out += self._summary(
                f"{len(self.running)} running (concurrency {self.concurrency}); {left} ready, waiting for a slot"
            )
        return out

    def _make_ahead(self, story: str) -> list[Instruction]:
        """The highest-ranked dependent of `story` (its tasks done, or in the merge train) that
        is ready once it and the others that far are merged, its lane not made ahead before."""
        if self.halted or self.failed_fast or self.cancelled or self.run_paused or self.ended:
            return []
        done = {s for s, status in self.statuses.items() if status == "done"} | self.merging | self.tasks_done
        busy = {*self.statuses, *self.running, *self.waiting, *self.paused, *self.ahead}
        candidates = [
            s.id
            for s in self.plan.stories
            if story in s.depends_on and s.id not in busy and all(d in done for d in s.depends_on)
        ]
        if not candidates:
            return []
        chosen = launch_order(self.plan, candidates, self.rank)[0]
        self.ahead.add(chosen)
        return [MakeAhead(chosen)]

    def _summary(self, text: str) -> list[Instruction]:
        if text == self.last_summary:
            return []
        self.last_summary = text
        return [Say(f"epic {self.plan.epic_id}: {text}")]

    # -- stories ending -------------------------------------------------------------------------
    def _finished(self, event: StoryFinished) -> list[Instruction]:
        story = event.story
        self._forget(story)
        self.statuses[story] = event.status
        if event.halt is not None and self.halted is None:
            self.halted = event.halt
        if event.status == "done":
            return []
        if event.status == "failed" and self.fail_fast and self.failed_fast is None:
            self.failed_fast = story
        out: list[Instruction] = []
        for dependent in dependents_of(self.plan, story):
            if (
                dependent not in self.statuses
                and dependent not in self.running
                and dependent not in self.waiting
            ):
                out.append(self._hold(dependent, f"waiting for {story}"))
        return out

    def _stopped(self, event: StoryStopped) -> list[Instruction]:
        self._forget(event.story)
        self.statuses[event.story] = event.status
        out: list[Instruction] = []
        if event.status == "cancelled":
            out.append(MarkWaiting(event.story, "cancelled; resumable"))
        if not self.running:
            self.stopping = False
            if self.cancelled is not None:
                out += self._end_cancelled(self.cancelled)
        return out

    def _cancel(self, event: Cancelled) -> list[Instruction]:
        if self.ended is not None or self.cancelled is not None:
            return []
        self.cancelled = event
        if self.running:
            self.stopping = True
            return [StopAll()]
        return self._end_cancelled(event)

    def _forget(self, story: str) -> None:
        if story in self.running:
            self.running.remove(story)
        self.merging.discard(story)
        self.tasks_done.discard(story)

    @property
    def _stopping_for_good(self) -> bool:
        """Halted or failed fast: the run ends once nothing runs, even with pauses unanswered
        (they stay in the trace, and a resumed run asks again)."""
        return self.halted is not None or self.failed_fast is not None

    # -- waiting on a person (docs/answers.md) --------------------------------------------------
    def _paused(self, event: Paused) -> list[Instruction]:
        if event.stopped is not None:
            self._forget(event.stopped)
        if event.story is None:
            if self.run_paused is not None:
                return []  # one question for the run, however many stories ran into it
            self.run_paused = event.reason
        elif event.story in self.paused:
            return []
        else:
            self.paused[event.story] = event.reason
        if event.told:
            return []
        return [AskPerson(event.story, event.reason, event.detail)]

    def _answered(self, event: Answered) -> list[Instruction]:
        if event.story is None:
            reason, self.run_paused = self.run_paused, None
            if reason is not None and not event.go_on and self.halted is None:
                self.halted = f"the {reason} pause was answered `stop`"
            return []
        reason = self.paused.pop(event.story, None)
        if reason is None or event.go_on:
            return []
        # `stop`: what the story would have done without `pauseOn`.
        self.statuses[event.story] = "waiting"
        why = f"stopped by an answer to its {reason} pause"
        out: list[Instruction] = [MarkWaiting(event.story, why)]
        if reason != "blocked" and self.halted is None:
            self.halted = f"story {event.story}: {why}"
        for dependent in dependents_of(self.plan, event.story):
            if (
                dependent not in self.statuses
                and dependent not in self.running
                and dependent not in self.waiting
            ):
                out.append(self._hold(dependent, f"waiting for {event.story}"))
        return out

    # -- the end --------------------------------------------------------------------------------
    def _hold(self, story: str, reason: str) -> MarkWaiting:
        self.waiting[story] = reason
        return MarkWaiting(story, reason)

    def _hold_rest(self, reason: str) -> list[Instruction]:
        return [
            self._hold(s.id, reason)
            for s in self.plan.stories
            if s.id not in self.statuses
            and s.id not in self.waiting
            and s.id not in self.running
            and s.id not in self.paused
        ]

    def _end(self, outcome: RunOutcome, reason: str | None = None) -> list[Instruction]:
        self.ended = End(outcome, reason)
        return [self.ended]

    def _end_cancelled(self, event: Cancelled) -> list[Instruction]:
        if event.broken is not None:
            return self._end("halted", event.broken)
        return self._end("cancelled", "cancelled by a signal")

    def _settle(self) -> list[Instruction]:
        """Nothing runs and nothing more will launch: how the run ends."""
        if self.failed_fast is not None:
            held = self._hold_rest(f"not started: fail-fast after {self.failed_fast}")
            return held + self._end("failed", f"story {self.failed_fast} failed (fail-fast)")
        if self.halted is not None:
            said: list[Instruction] = [
                Say(f"epic {self.plan.epic_id}: stopped launching stories — {self.halted}")
            ]
            return said + self._hold_rest(f"not started: {self.halted}") + self._end("halted", self.halted)
        if len(self.statuses) == len(self.plan.stories) and all(s == "done" for s in self.statuses.values()):
            return self._end("done")
        return self._end("failed")
