"""From folded run state to `flow/*` notifications, and their pacing.

`notes_for` is pure: given the run view after an event was folded, it says which notifications
the event implies. `Pacer` sends them: transitions (a task started or completed, a lease or
release, a lane's status, executor or task changing, a run's status) go out at once and in order;
pure progress updates of one lane or one run's cost (tokens, dollars) are coalesced to at most one
per `interval` per key, the later state winning. A transition supersedes a pending update of the
same key, since it carries the newer state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from flowd import protocol

if TYPE_CHECKING:  # flowd.events.model needs pydantic: imported on first use (docs/performance.md)
    from flowd.control.shapes import Places
    from flowd.events.model import (
        Event,
        ExecutorExcluded,
        ExecutorLeased,
        ExecutorReleased,
        ExecutorResumed,
        LaneEscape,
        PerimeterViolation,
    )
    from flowd.trace.view import LaneView, RunView

RUN = protocol.RUN.name
LANE = protocol.LANE.name
TASK = protocol.TASK.name
CLONE = protocol.CLONE.name
COST = protocol.COST.name
ATTENTION = protocol.ATTENTION.name


@dataclass(frozen=True)
class Note:
    """One notification to send. `sig` is what makes an update a transition: when the signature of
    a key changes, the note is sent at once; when it is unchanged, the note may be coalesced."""

    method: str
    params: dict[str, Any]
    key: Hashable
    transition: bool = False
    sig: Hashable = None


def lane_note(
    view: RunView, lane: LaneView, *, transition: bool = False, places: Places | None = None
) -> Note:
    task = lane.task
    sig = (
        lane.status,
        lane.executor,
        lane.clone,
        task.index if task else None,
        len(lane.tasks),
        lane.flaky,
        lane.merge_revision,
    )
    from flowd.control.shapes import lane_wire

    return Note(LANE, lane_wire(view, lane, places), (LANE, view.run_id, lane.lane), transition, sig)


def run_note(view: RunView, places: Places | None = None) -> Note:
    from flowd.control.shapes import run_wire

    return Note(RUN, run_wire(view, places), (RUN, view.run_id), True)


def cost_note(view: RunView, *, transition: bool = False) -> Note:
    from flowd.control.shapes import cost_wire

    return Note(COST, cost_wire(view), (COST, view.run_id), transition, view.budget_exceeded)


def clone_params(
    view: RunView,
    executor: str,
    state: str,
    *,
    role: str,
    clone: int | None = None,
    label: str | None = None,
    reason: str | None = None,
    until: str | None = None,
) -> dict[str, Any]:
    """`flow/clone` params, through the declared model (docs/protocol.md)."""
    from flowd.protocol.models import CloneParams, CloneState

    return CloneParams(
        run_id=view.run_id,
        executor=executor,
        clone=clone,
        role=role,
        label=label,
        state=CloneState(state),
        reason=reason,
        until=until,
    ).wire()


def _lease_params(view: RunView, event: ExecutorLeased | ExecutorReleased, state: str) -> dict[str, Any]:
    return clone_params(view, event.executor, state, role=event.role, clone=event.clone, label=event.label)


def _exclusion_params(view: RunView, event: ExecutorExcluded | ExecutorResumed, state: str) -> dict[str, Any]:
    # docs/protocol.md lists `role` on every flow/clone; an exclusion takes the executor out of
    # every role it serves, hence "all". `clone` is absent on exclusions.
    return clone_params(view, event.executor, state, role="all", reason=event.reason, until=event.until)


def _task_notes(view: RunView, lane_id: str, indexes: list[int]) -> list[Note]:
    from flowd.control.shapes import task_wire

    lane = view.lanes.get(lane_id)
    if lane is None:
        return []
    notes = []
    for index in indexes:
        if 1 <= index <= len(lane.tasks):
            task = lane.tasks[index - 1]
            key = (TASK, view.run_id, lane_id, index, task.state)
            notes.append(Note(TASK, task_wire(view, lane, task), key, True))
    return notes


def _lane(view: RunView, lane_id: str | None, places: Places | None) -> list[Note]:
    if lane_id is None or lane_id not in view.lanes:
        return []
    return [lane_note(view, view.lanes[lane_id], places=places)]


def repair_note(view: RunView, event: PerimeterViolation) -> Note:
    """A perimeter repair undid changes in a story's worktree: say so (docs/protocol.md).

    `flow/attention` with `reason: "repaired"`: nothing waits on the user (so no `cleared`
    follows and there is nothing to answer: `actions` is empty), but whoever wrote those paths,
    perhaps the user by hand, must learn that their changes were put back.
    """
    listed = ", ".join(f"{p.path} ({p.kind})" for p in event.paths)
    from flowd.base.layout import story_findings
    from flowd.control.shapes import epic_branch

    branch = epic_branch(view)
    findings = story_findings(view.epic_id, event.lane).as_posix()
    message = (
        f"story '{event.lane}': the perimeter repair restored {len(event.paths)} path(s) from {branch}, "
        f"undoing their changes in its worktree: {listed} (see {findings})"
    )
    from flowd.protocol.models import AttentionParams

    params = AttentionParams(
        run_id=view.run_id,
        lane=event.lane,
        reason="repaired",
        message=message,
        actions=[],
        paths=[p.path for p in event.paths],
    ).wire()
    return Note(ATTENTION, params, (ATTENTION, view.run_id, event.lane, "repaired"), True)


ESCAPE_DONE = {
    "denied": "was refused by the OS",
    "undone": "was put back",
    "reported": "could not be put back",
}


def escape_note(view: RunView, event: LaneEscape) -> Note:
    """A lane's process wrote past its story (docs/sandbox-detection.md): `flow/attention` with
    `reason: "escaped"`. It informs, like `repaired`: the story fails for it (and that `failed`
    attention is what waits on the user), so `actions` is empty and no `cleared` follows."""
    from flowd.protocol.models import AttentionParams

    message = f"story '{event.lane}' wrote past its lane: {event.path} ({event.what}); it {ESCAPE_DONE[event.action]}"
    params = AttentionParams(
        run_id=view.run_id, lane=event.lane, reason="escaped", message=message, actions=[], paths=[event.path]
    ).wire()
    return Note(ATTENTION, params, (ATTENTION, view.run_id, event.lane, "escaped", event.path), True)


SANDBOX_NOTE = "sandbox: "  # the run's one word on its confinement (flowd/engine/confinement.py)


def unconfined_note(view: RunView, message: str) -> Note:
    """The run is not confined (no Landlock, or `[sandbox] mode` says so; docs/sandbox.md):
    `flow/attention` with `reason: "unconfined"`, once per run, nothing to answer."""
    from flowd.protocol.models import AttentionParams

    params = AttentionParams(run_id=view.run_id, reason="unconfined", message=message, actions=[]).wire()
    return Note(ATTENTION, params, (ATTENTION, view.run_id, "unconfined"), True)


def notes_for(view: RunView, event: Event, places: Places | None = None) -> list[Note]:
    """The notifications implied by `event`, already folded into `view`; with `places`, the run's
    and lanes' notifications say where their things are (`flowd/control/shapes.py`)."""
    from flowd.events.model import (
        BudgetExceeded,
        ExecutorExcluded,
        ExecutorLeased,
        ExecutorReleased,
        ExecutorResumed,
        GateFlaky,
        Info,
        LaneEscape,
        LanePlaced,
        MergeBatchStarted,
        MergeRevision,
        MergeRolledBack,
        PerimeterViolation,
        RunEnded,
        RunStarted,
        StageStarted,
        StoryAnswered,
        StoryPaused,
        StoryStatusChanged,
        TaskCompleted,
        TasksPlanned,
        TaskStarted,
        TokensUsed,
    )

    if isinstance(event, RunStarted):
        return [
            run_note(view, places),
            *(lane_note(view, lane, transition=True, places=places) for lane in view.lanes.values()),
        ]
    if isinstance(event, RunEnded):
        lanes = [lane_note(view, lane, transition=True, places=places) for lane in view.lanes.values()]
        return [*lanes, cost_note(view, transition=True), run_note(view, places)]
    if isinstance(event, StoryStatusChanged):
        return [*_lane(view, event.story, places), run_note(view, places)]
    if isinstance(event, TasksPlanned):
        lane = view.lanes.get(event.lane)
        count = len(lane.tasks) if lane else 0
        return [*_task_notes(view, event.lane, list(range(1, count + 1))), *_lane(view, event.lane, places)]
    if isinstance(event, TaskStarted | TaskCompleted):
        return [*_task_notes(view, event.lane, [event.index]), *_lane(view, event.lane, places)]
    if isinstance(event, TokensUsed):
        return [*_lane(view, event.lane, places), cost_note(view)]
    if isinstance(event, LanePlaced):  # the lane's `node` (docs/scale-out.md)
        return _lane(view, event.lane, places)
    if isinstance(event, ExecutorLeased | ExecutorReleased):
        state = "leased" if isinstance(event, ExecutorLeased) else "released"
        note = Note(CLONE, _lease_params(view, event, state), (CLONE, view.run_id, event.executor), True)
        coder_lane = _lane(view, event.label, places) if event.role == "coder" else []
        return [note, *coder_lane]
    if isinstance(event, ExecutorExcluded | ExecutorResumed):
        state = "excluded" if isinstance(event, ExecutorExcluded) else "resumed"
        return [
            Note(CLONE, _exclusion_params(view, event, state), (CLONE, view.run_id, event.executor), True)
        ]
    if isinstance(event, BudgetExceeded):
        return [cost_note(view, transition=True)]
    if isinstance(event, PerimeterViolation) and event.action == "restored":
        return [repair_note(view, event)]
    # The merge train (docs/merging.md): `queued`, `merging` with its batch, back to `active`.
    if isinstance(event, MergeBatchStarted):
        return [note for lane in event.lanes for note in _lane(view, lane, places)]
    if isinstance(event, StageStarted | MergeRolledBack) and event.lane is not None:
        return _lane(view, event.lane, places)
    if isinstance(event, StoryPaused | StoryAnswered):
        # The run may be `paused` now (or no longer): the pause comes after its story's status.
        return [run_note(view, places)]
    if isinstance(event, LaneEscape):
        return [escape_note(view, event)]
    if isinstance(event, Info) and event.lane is None and event.message.startswith(SANDBOX_NOTE):
        return [unconfined_note(view, event.message)]
    if isinstance(event, GateFlaky | MergeRevision):
        return _lane(view, event.lane, places)  # a transition: `flaky`/`mergeRevision` changed its signature
    return []


def snapshot(view: RunView, places: Places | None = None) -> list[Note]:
    """Every notification a client needs to draw a run it has not seen (attach, re-attach)."""
    notes: list[Note] = [run_note(view, places)]
    for lane in view.lanes.values():
        notes.append(lane_note(view, lane, transition=True, places=places))
        notes.extend(_task_notes(view, lane.lane, [t.index for t in lane.tasks]))
    for clone in view.clones.values():
        if clone.held:
            params = clone_params(
                view, clone.executor, "leased", role=clone.role, clone=clone.clone, label=clone.label
            )
            notes.append(Note(CLONE, params, (CLONE, view.run_id, clone.executor), True))
    notes.append(cost_note(view, transition=True))
    return notes


class Timer(Protocol):
    def cancel(self) -> None: ...


Scheduler = Callable[[float, Callable[[], None]], Timer]


class Pacer:
    """Sends notes through `send`, coalescing non-transitions per key to one per `interval` seconds."""

    def __init__(
        self,
        send: Callable[[str, dict[str, Any]], None],
        schedule: Scheduler,
        *,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._schedule = schedule
        self._interval = interval
        self._clock = clock
        self._last_sent: dict[Hashable, float] = {}
        self._sigs: dict[Hashable, Hashable] = {}
        self._pending: dict[Hashable, Note] = {}
        self._timers: dict[Hashable, Timer] = {}

    def offer(self, note: Note) -> None:
        key = note.key
        changed = key not in self._sigs or self._sigs[key] != note.sig
        now = self._clock()
        if note.transition or changed:
            self._drop_pending(key)
            self._emit(note, now)
            return
        if key in self._pending:
            self._pending[key] = note  # the later state wins; the timer is already set
            return
        due = self._last_sent.get(key, float("-inf")) + self._interval
        if now >= due:
            self._emit(note, now)
            return
        self._pending[key] = note
        self._timers[key] = self._schedule(due - now, lambda: self._fire(key))

    def flush(self) -> None:
        """Send every pending update now (a run ended; the server is stopping)."""
        for key in list(self._pending):
            self._fire(key)

    def forget(self, predicate: Callable[[Hashable], bool]) -> None:
        """Drop bookkeeping for keys that can never be sent again (a run that ended)."""
        for store in (self._last_sent, self._sigs):
            for key in [k for k in store if predicate(k)]:
                del store[key]

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        note = self._pending.pop(key, None)
        if note is not None:
            self._emit(note, self._clock())

    def _drop_pending(self, key: Hashable) -> None:
        self._pending.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _emit(self, note: Note, now: float) -> None:
        self._last_sent[note.key] = now
        self._sigs[note.key] = note.sig
        self._send(note.method, note.params)
