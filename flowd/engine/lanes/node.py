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
import socket
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from flowd.base import layout
from flowd.base.fsio import write_text_atomic
from flowd.cost.prices import pricer
from flowd.engine.confinement import run_confinement
from flowd.engine.context import RunContext
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.ports import PortSlots
from flowd.engine.core.stops import Halt
from flowd.engine.detect import Detector
from flowd.engine.state import EpicPaths, StoryState, save_state
from flowd.engine.story import StoryRun
from flowd.plan.model import Story, StoryPlan
from flowd.roster.pool import RosterPool
from flowd.sandbox import landlock
from flowd.sandbox.confine import active, effective_mode
from flowd.store.config import Roster, Settings
from flowd.trace.events import Event, Info, LaneEscape, StoryStatusChanged, TaskCompleted
from flowd.trace.view import RunView
from flowd.vcs.gitcli import GitError, run_git
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


@dataclass
class LaneSpec:
    """Everything a node needs to run one story: sent by the runner with each placement."""

    run_id: str
    plan: StoryPlan
    story: str
    settings: Settings
    remote: str  # a URL every node can reach
    state: StoryState | None = None  # the runner's copy: the resume point
    checkpoint: str | None = None  # the task checkpoint the runner holds
    story_budget_usd: float | None = None


@dataclass
class Mirror:
    """The story's files in the node's `.flow`, as last sent to the runner (which keeps its own copy)."""

    state: str | None = None
    checkpoint: str | None = None


# (kind, body, time.time() when the node posted it): ("event", Event) | ("files", {name: text}) |
# ("timing", {phase: seconds}) | ("outcome", StoryOutcome); the runner measures the stream's
# latency from the third field (docs/scale-out.md: figures).
LaneMessage = tuple[str, object, float]
PUSH_TRIES = 3
FETCHED_REFS = "flowd-lanes"  # where a placement fetches its story branch to, for a moment
_PUSH = "push"  # a marker in the lane's queue: push the story branch before what follows goes out


def lane_cache(node_id: str, remote: str) -> Path:
    """Where this node keeps its clone of `remote` and its worktrees (one per node and remote)."""
    base = os.environ.get("FLOWD_LANE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowd" / "lanes"
    )
    key = hashlib.sha256(remote.encode()).hexdigest()[:12]
    return Path(base) / node_id[:16] / key


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

    def ensure_clone(self) -> NodeRepo:
        """The node's clone of the remote (made on first use; lanes fetch what they need)."""
        if self._repo is None:
            with self.lock:
                if not (self.clone / ".git").exists():
                    shutil.rmtree(self.clone, ignore_errors=True)
                    self.clone.parent.mkdir(parents=True, exist_ok=True)
                    run_git(self.clone.parent, ["clone", "-q", "--no-checkout", self.spec.remote, str(self.clone)],
                            f"cloning {self.spec.remote} on this node")  # fmt: skip
            repo = NodeRepo(self.clone, self.lock)
            repo.ensure_flow_excluded()
            self._repo = repo
        return self._repo

    def pool(self) -> RosterPool:
        if self._pool is None:
            self._pool = RosterPool(
                self._roster(),
                state_path=self.clone / ".flow" / "roster-state.json",
                emit=self._route,
                log_dir=self.paths.agent_logs(),
            )
        return self._pool

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
        if count > 0 and effective_mode(self.spec.settings.sandbox.mode, landlock.abi()) != "enforce":
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
        label = getattr(event, "label", None)
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
            while True:
                getter = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                batch = [getter.result()] if getter in done else []
                if getter not in done:
                    getter.cancel()
                while not queue.empty():
                    batch.append(queue.get_nowait())
                out: list[LaneMessage] = []
                for message in batch:
                    if message[0] != _PUSH:
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
                if task.done() and queue.empty():
                    now = time.time()
                    yield [("timing", lane.timing.summary(), now), ("outcome", task.result(), now)]
                    return
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()


@dataclass
class LaneTiming:
    """Where a placement's time went on the node (docs/scale-out.md: figures)."""

    lock_wait: float = 0.0
    git: float = 0.0
    pipeline: float = 0.0
    pushes: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        return {
            "nodeLockWait": self.lock_wait,
            "nodeGit": self.git,
            "pipeline": self.pipeline,
            "pushes": float(len(self.pushes)),
            "pushTime": sum(self.pushes),
            "pushMedian": statistics.median(self.pushes) if self.pushes else 0.0,
        }


class NodeLane:
    """One placement of one story on this node; `post` hands a message to the runner's stream."""

    def __init__(self, host: NodeHost, spec: LaneSpec, post: Callable[[LaneMessage], None]) -> None:
        self.host, self.spec = host, spec
        self._post = post
        self.clone = host.clone
        self.epic = spec.plan.epic_id
        self.branch = layout.story_branch(self.epic, spec.story)
        self.worktree = host.cache / "wt" / self.epic / spec.story
        self.paths = host.paths
        self.mirror = Mirror()
        self.findings_sent = 0  # how much of the node's findings file the runner has (bytes)
        self.timing = LaneTiming()
        self.pushed: str | None = None  # the commit the remote has for the story branch
        self.retried: list[str] = []  # why a push had to be tried again
        self._push_lock = threading.Lock()

    def post(self, kind: str, body: object) -> None:
        self._post((kind, body, time.time()))

    def _git(self, *args: str, what: str) -> str:
        return run_git(self.clone, args, what).stdout

    def prepare(self) -> None:
        """Refresh the node's copy: the epic and the story's pushed branch, in one fetch; the
        story's files as the runner knows them."""
        remote = self.spec.remote
        self.host.ensure_clone()
        asked = time.monotonic()
        with self.host.lock:
            got = time.monotonic()
            self.timing.lock_wait = got - asked
            # The truth is on the remote: a worktree an earlier placement left here is disposable.
            if (self.worktree / ".git").exists():
                with contextlib.suppress(GitError):
                    self._git(
                        "worktree", "remove", "--force", str(self.worktree), what="removing a stale worktree"
                    )
            shutil.rmtree(self.worktree, ignore_errors=True)
            self._git("worktree", "prune", what="pruning worktrees")
            epic = layout.epic_branch(self.epic)
            # The story branch through a pattern (which may match nothing) into a namespace no
            # worktree has checked out; the exact name is picked from it below.
            pushed_ref = f"refs/{FETCHED_REFS}/{self.branch}"
            self._git("fetch", "-q", "--no-tags", remote, f"+refs/heads/{epic}:refs/heads/{epic}",
                      f"+refs/heads/{self.branch}*:refs/{FETCHED_REFS}/{self.branch}*",
                      what=f"fetching {epic} and {self.branch}")  # fmt: skip
            pushed = run_git(
                self.clone, ["rev-parse", "-q", "--verify", pushed_ref], "", ok_codes=(0, 1)
            ).stdout.strip()
            if pushed:
                self._git("update-ref", f"refs/heads/{self.branch}", pushed, what=f"updating {self.branch}")
                self._git("update-ref", "-d", pushed_ref, what="tidying the fetched refs")
                self.pushed = pushed
            else:
                self.spec.state = self.spec.checkpoint = None  # nothing was pushed: nothing to resume
                if self._has_branch():
                    self._git("branch", "-D", self.branch, what="dropping a stale branch")
            self.timing.git = time.monotonic() - got
        self._write_story_files()

    def _has_branch(self) -> bool:
        return bool(self._git("branch", "--list", self.branch, what="listing branches").strip())

    def _write_story_files(self) -> None:
        spec, story = self.spec, self.spec.story
        state_file, checkpoint = self.paths.state(story), self.paths.checkpoint(story)
        # Findings the node wrote on an earlier placement have reached the runner already.
        with contextlib.suppress(OSError):
            self.findings_sent = self.paths.findings(story).stat().st_size
        if spec.state is None:
            for stale in (state_file, checkpoint):
                with contextlib.suppress(FileNotFoundError):
                    stale.unlink()
            return
        save_state(self.paths, spec.state.model_copy(update={"worktree": str(self.worktree)}))
        if spec.checkpoint is not None:
            write_text_atomic(checkpoint, spec.checkpoint)
        else:
            with contextlib.suppress(FileNotFoundError):
                checkpoint.unlink()
        self.mirror = Mirror(state_file.read_text(encoding="utf-8"), spec.checkpoint)

    def push(self) -> None:
        """The story branch to the remote (the point a lane placed again resumes from), unless the
        remote has its head already."""
        with self._push_lock:
            head = run_git(self.clone, ["rev-parse", "-q", "--verify", f"refs/heads/{self.branch}"], "",
                           ok_codes=(0, 1)).stdout.strip()  # fmt: skip
            if not head or head == self.pushed:
                return
            started = time.monotonic()
            args = ["push", "-q", "--force", self.spec.remote, f"{head}:refs/heads/{self.branch}"]
            for attempt in range(PUSH_TRIES):
                try:
                    run_git(self.clone, args, f"pushing {self.branch}")
                    break
                except GitError as exc:
                    detail = " / ".join(exc.detail.splitlines()[-4:]) or str(exc)
                    if attempt + 1 < PUSH_TRIES:
                        # A refusal (a hook, permissions) is refused again; anything else may pass.
                        self.retried.append(detail)
                        time.sleep(0.2 * (attempt + 1))
                        continue
                    raise Halt(f"the remote {self.spec.remote} refused the push of {self.branch} ({detail}); "
                               "let the runner's machine and every node push there, then run again")  # fmt: skip
            self.timing.pushes.append(time.monotonic() - started)
            self.pushed = head

    def retry_notes(self) -> list[Info]:
        """What made a push go through only when tried again (said once, then forgotten)."""
        notes, self.retried = self.retried, []
        return [Info(lane=self.spec.story, message=f"pushing {self.branch} failed and was tried again: {why}")
                for why in notes]  # fmt: skip

    def halted(self, refused: Halt) -> list[LaneMessage]:
        """The last messages of a lane whose push was refused: the story waits, the run halts."""
        outcome = outcome_of(refused, StoryFacts(self.spec.story, self.branch, []))
        now = time.time()
        event = StoryStatusChanged(story=self.spec.story, status="waiting", reason=outcome.reason)
        return [("event", event, now), ("timing", self.timing.summary(), now), ("outcome", outcome, now)]

    def files(self) -> None:
        """Send the story's state and checkpoint when they changed (the runner resumes from its copy)."""
        story = self.spec.story
        now = Mirror(_read(self.paths.state(story)), _read(self.paths.checkpoint(story)))
        changed = {k: v for k, v in vars(now).items() if v is not None and v != getattr(self.mirror, k)}
        added = self._new_findings()
        if added:
            changed["findings"] = added
        if changed:
            self.mirror = now
            self.post("files", changed)

    def _new_findings(self) -> str | None:
        """What the lane added to its findings (a confinement refusal, review findings) since
        the runner last heard: the runner appends it to its own copy."""
        try:
            data = self.paths.findings(self.spec.story).read_bytes()
        except OSError:
            return None
        if len(data) <= self.findings_sent:
            return None
        added = data[self.findings_sent :].decode("utf-8", "replace")
        if self.findings_sent == 0:  # the node's file began with its own title: the runner has one
            added = added.split("\n", 1)[1] if added.startswith("# Findings") else added
        self.findings_sent = len(data)
        return added.strip() or None

    async def run(self) -> StoryOutcome:
        spec, host, loop = self.spec, self.host, asyncio.get_running_loop()
        home = threading.get_ident()
        await asyncio.to_thread(self.prepare)
        started = time.monotonic()
        view = RunView(run_id=spec.run_id, pricer=pricer(spec.settings))

        def emit(event: Event) -> None:
            if threading.get_ident() != home:  # git work runs in threads and says what it did
                loop.call_soon_threadsafe(emit, event)
                return
            view.apply_event(event)
            # What the event announces is durable first: a task's commit is pushed (by the
            # stream, off this loop) before its checkpoint and the event go out (a lane lost
            # right after resumes past it).
            if isinstance(event, TaskCompleted):
                self._post((_PUSH, None, time.time()))
            self.files()
            self.post("event", event)

        ctx = RunContext(
            repo=host.ensure_clone(), plan=spec.plan, plan_path=self.clone / ".flow" / "plan.json",
            settings=spec.settings, run_id=spec.run_id, epic_wt=self.clone, worktree_root=host.cache / "wt",
            paths=self.paths, pool=host.pool(), emit=emit, view=view, story_budget_usd=spec.story_budget_usd,
        )  # fmt: skip
        ctx.ports = host.ports  # lanes side by side on this node get distinct port ranges
        ctx.detect = await asyncio.to_thread(host.detector)
        if ctx.detect is not None:
            ctx.detect.forget(self.worktree)  # made again by `prepare`
        host.attach(spec.story, emit)
        # The same policy as a local lane's (docs/sandbox.md), on this node's clone and worktrees;
        # its refusals reach the runner as events and as findings (`files`).
        confinement = run_confinement(
            ctx.repo, spec.settings, ctx.worktree_root, spec.plan.epic_id, self.paths, emit
        )
        if confinement.mode == "detect":  # never claimed where the node's kernel cannot
            emit(
                Info(
                    lane=spec.story, message=node_unconfined(spec.settings.sandbox.mode, confinement.version)
                )
            )
        try:
            with active(confinement):
                outcome = await _PushingStoryRun(ctx, spec.plan.require(spec.story), self).run()
        finally:
            host.detach(spec.story)
        self.timing.pipeline = time.monotonic() - started
        self.files()
        return outcome


def node_unconfined(setting: str, version: int) -> str:
    """What a lane placed on a node that does not enforce says (docs/sandbox.md): it is checked
    after each step there, not confined."""
    why = (
        '[sandbox] mode = "detect"'
        if setting == "detect"
        else f"this node offers {f'Landlock ABI {version}' if version else 'no Landlock'} (ABI 2 needed)"
    )
    return (
        f"sandbox: this lane runs on {socket.gethostname()} in detect mode ({why}): it is checked "
        "after each step there, not confined (docs/sandbox.md)"
    )


class _PushingStoryRun(StoryRun):
    """The story pipeline where a local run would merge: push the branch, leave the merge to the runner."""

    def __init__(self, ctx: RunContext, story: Story, lane: NodeLane) -> None:
        super().__init__(ctx, story)
        self.lane = lane

    async def _merge(self) -> str:
        return await self._merge_locked()

    async def _merge_locked(self) -> str:
        # Where the pipeline merges (with the merge lock held, or taking it): never on a node.
        await asyncio.to_thread(self.lane.push)
        for note in self.lane.retry_notes():
            self.ctx.emit(note)
        return await asyncio.to_thread(self.ctx.repo.head, self.branch)

    def _finish(self, outcome: StoryOutcome) -> StoryOutcome:
        # Done here means pushed: the runner says "done" once it has merged.
        if outcome.status == "done":
            return outcome
        return super()._finish(outcome)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


__all__ = ["HostSpec", "LaneMessage", "LaneSpec", "NodeHost", "NodeLane", "lane_cache"]
