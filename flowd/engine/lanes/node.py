"""Story lanes on a cluster node (docs/scale-out.md): clone the remote (cached per node), make the
story worktree, run the story pipeline there with the roster's agents and the gates, push the
story branch after every task, and hand every event back to the runner.

This module runs inside a Ray actor on any node; it imports nothing of Ray, so the lane itself is
plain flowd (the actor wrapper is `flowd/engine/lanes/ray_lanes.py`'s). The runner stays the only
writer of the trace and the only merger: a lane stops where a local story would merge, with its
branch pushed to the remote.

`NodeHost` is what a node keeps across the lanes of one run, as the runner does for local lanes:
the clone, one roster pool whose agent clones stay warm from lane to lane (started ahead with
`RosterPool.prestart`), and the lanes' port ranges. `NodeLane` is one placement of one story.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from flowd.base.fsio import write_text_atomic
from flowd.engine.core.ports import PortSlots
from flowd.engine.core.stops import Halt
from flowd.engine.detect import Detector
from flowd.engine.lanes.node_gates import CandidateSlots, GateSpec, gate_candidate
from flowd.engine.lanes.node_lane import FETCHED_REFS, PUSH, LaneMessage, LaneSpec, NodeLane, drained
from flowd.engine.state import EpicPaths
from flowd.events.model import Event, LaneEscape
from flowd.roster.pool import RosterPool
from flowd.sandbox import landlock
from flowd.sandbox.confine import effective_mode
from flowd.store.config import Roster, Settings
from flowd.vcs.gitcli import run_git
from flowd.vcs.gitops import Repo


@dataclass
class HostSpec:
    """What every lane of one run on one node shares: sent once, when the node's host starts."""

    run_id: str
    epic: str
    remote: str  # a URL every node can reach
    roster: Roster
    scripts: dict[str, tuple[str, str]]  # executor id → (file name, text) of its script
    settings: Settings
    prestart: int = 0  # agent clones per role (coder, planner) to start before the first lane


def lane_cache(node_id: str, remote: str) -> Path:
    """Where this node keeps its clone of `remote` and its worktrees (one per node and remote)."""
    base = os.environ.get("FLOWD_LANE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowd" / "lanes"
    )
    key = hashlib.sha256(remote.encode()).hexdigest()[:12]
    return Path(base) / node_id[:16] / key


def _whole(clone: Path) -> bool:
    """Whether a node clone was finished (a clone older than the rename into place can be half
    made: `.git` without its config)."""
    git_dir = clone / ".git"
    return (git_dir / "config").is_file() and (git_dir / "HEAD").is_file()


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class NodeLock:
    """The node's clone is shared by its lanes (and by other runs' hosts on the node): fetches and
    worktree changes take turns — a thread lock in this process, a file lock across processes.

    A fetch must never overlap a `git worktree add`: git gives a new worktree a placeholder HEAD
    (the null id) for a moment, and a fetch's connectivity check (`rev-list --all`) that reads it
    dies with "bad object worktrees/…/HEAD", reported as "<remote> did not send all necessary
    objects" (docs/scale-out.md: the bench's one failure). Not re-entrant."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with _THREAD_LOCKS_GUARD:
            self._thread = _THREAD_LOCKS.setdefault(str(path), threading.Lock())
        self._held = threading.local()

    def __enter__(self) -> None:
        self._thread.acquire()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a")
            fcntl.flock(handle, fcntl.LOCK_EX)
        except BaseException:
            self._thread.release()
            raise
        self._held.handle = handle

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        handle: IO[str] = self._held.handle
        try:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
        finally:
            self._thread.release()


class NodeRepo(Repo):
    """The node's clone: its worktree changes take the node's lock (`NodeLock`)."""

    def __init__(self, root: Path, lock: NodeLock) -> None:
        super().__init__(root)
        self._lock = lock


class NodeHost:
    """A run's lanes on one node: the clone, one roster pool kept warm across lanes, the ports.

    Agent clones outlive lanes here as they do in a local run (docs/scale-out.md: what happens),
    so a lane placed on a warm node starts no agent process; an executor's `slots` limit the
    calls on this node at once. Pool events (leases) reach the runner through the stream of the
    lane they belong to (their `label`), else of any lane running here, else the next one."""

    def __init__(self, spec: HostSpec, node_id: str) -> None:
        self.spec = spec
        self.cache = lane_cache(node_id, spec.remote)
        self.clone = self.cache / "repo"
        self.lock = NodeLock(self.cache / "lock")
        self.paths = EpicPaths(self.clone, spec.epic)
        worktree = spec.settings.worktree
        self.ports = PortSlots(worktree.port_base, worktree.ports_per_lane)
        self.lanes: dict[str, Callable[[Event], None]] = {}
        self.unrouted: list[Event] = []
        self._repo: NodeRepo | None = None
        self._pool: RosterPool | None = None
        self._detector: Detector | None = None
        self.candidates = CandidateSlots(self.cache / "wt", spec.epic)

    def ensure_clone(self) -> NodeRepo:
        """The node's clone of the remote (made on first use; lanes fetch what they need)."""
        if self._repo is None:
            with self.lock:
                if not _whole(self.clone):
                    self._clone()
            repo = NodeRepo(self.clone, self.lock)
            repo.ensure_flow_excluded()
            self._repo = repo
        return self._repo

    def _clone(self) -> None:
        """Clone beside the clone's place and rename it there when whole: a host ended while
        cloning (its run's driver killed) leaves no half clone that later runs would take for one.
        Partial clones are dropped first; the node's lock is held, so none of them is still growing."""
        parent = self.clone.parent
        parent.mkdir(parents=True, exist_ok=True)
        for stale in [self.clone, *parent.glob(f"{self.clone.name}.partial-*")]:
            shutil.rmtree(stale, ignore_errors=True)
        partial = parent / f"{self.clone.name}.partial-{os.getpid()}"
        run_git(parent, ["clone", "-q", "--no-checkout", self.spec.remote, str(partial)],
                f"cloning {self.spec.remote} on this node")  # fmt: skip
        os.rename(partial, self.clone)

    def pool(self) -> RosterPool:
        if self._pool is None:
            self._pool = RosterPool(
                self._roster(),
                state_path=self.clone / ".flow" / "roster-state.json",
                emit=self._route,
                log_dir=self.paths.agent_logs(),
                lane_bound=self._enforcing(),
            )
        return self._pool

    def _enforcing(self) -> bool:
        """Whether this node's lanes are confined, each agent process to one lane (docs/sandbox.md)."""
        return effective_mode(self.spec.settings.sandbox.mode, landlock.abi()) == "enforce"

    def _roster(self) -> Roster:
        """The runner's roster, with each scripted executor's script written on this node."""
        roster = self.spec.roster.model_copy(deep=True)
        where = self.cache / "scripts" / self.spec.run_id
        for entry in roster.executors:
            shipped = self.spec.scripts.get(entry.id)
            if shipped is not None:
                path = where / f"{entry.id}-{shipped[0]}"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, shipped[1])
                entry._script_path = path
        return roster

    async def warm(self) -> None:
        """Clone the remote and start the first lanes' agent clones before any lane is placed."""
        await asyncio.to_thread(self.ensure_clone)
        count = self.spec.prestart
        # A confined agent process serves one lane for life (docs/sandbox.md): none starts ahead.
        if count > 0 and not self._enforcing():
            self.pool().prestart({"coder": count, "planner": count}, self.clone)

    def detector(self) -> Detector | None:
        """Detection on this node (docs/sandbox-detection.md), one for every lane placed here
        (blame needs every lane's step windows): the clone stands for the user's checkout."""
        sandbox = self.spec.settings.sandbox
        if self._detector is None and sandbox.mode != "off":
            repo = self.ensure_clone()
            self._detector = Detector(
                root=repo.root, common_dir=repo.common_dir, epic_id=self.spec.epic, epic_wt=self.clone,
                worktree_root=self.cache / "wt", emit=self._route_escape,
                allow_write=tuple(sandbox.allow_write), own_refs=(f"refs/{FETCHED_REFS}/",),
            )  # fmt: skip
            self._detector.start()
        return self._detector

    def _route_escape(self, event: Event) -> None:
        """The detector's events go to the lane they blame (a `LaneEscape` names it)."""
        target = self.lanes.get(event.lane) if isinstance(event, LaneEscape) else None
        if target is not None:
            target(event)
        else:
            self._route(event)

    def _route(self, event: Event) -> None:
        # The pool's events name their lease's label; a late side request's usage its lane.
        label = getattr(event, "label", None) or getattr(event, "lane", None)
        target = self.lanes.get(label.split("#t")[0]) if isinstance(label, str) else None
        if target is None and self.lanes:
            target = next(iter(self.lanes.values()))
        if target is None:
            self.unrouted.append(event)
            return
        target(event)

    def attach(self, story: str, emit: Callable[[Event], None]) -> None:
        self.lanes[story] = emit
        waiting, self.unrouted = self.unrouted, []
        for event in waiting:
            emit(event)

    def detach(self, story: str) -> None:
        self.lanes.pop(story, None)

    async def stream(self, spec: LaneSpec) -> AsyncIterator[list[LaneMessage]]:
        """One placement: its messages in batches (each batch one message on the wire), the
        outcome last; a push marker is carried out before anything after it goes out."""
        queue: asyncio.Queue[LaneMessage] = asyncio.Queue()
        lane = NodeLane(self, spec, queue.put_nowait)
        task = asyncio.create_task(lane.run())
        try:
            async for batch in drained(queue, task):
                out: list[LaneMessage] = []
                for message in batch:
                    if message[0] != PUSH:
                        out.append(message)
                        continue
                    if out:
                        yield out
                        out = []
                    try:
                        await asyncio.to_thread(lane.push)
                        out.extend(("event", note, time.time()) for note in lane.retry_notes())
                    except Halt as refused:
                        task.cancel()
                        with contextlib.suppress(BaseException):
                            await task
                        yield lane.halted(refused)
                        return
                if out:
                    yield out
            now = time.time()
            yield [("timing", lane.timing.summary(), now), ("outcome", task.result(), now)]
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def gate(self, spec: GateSpec) -> AsyncIterator[list[LaneMessage]]:
        """A merge candidate's epic gates on this node (node_gates.py): events, then the verdict."""
        async for batch in gate_candidate(self, self.candidates, spec):
            yield batch

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()


__all__ = ["HostSpec", "NodeHost", "lane_cache"]
