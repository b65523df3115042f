"""One placement of one story on a cluster node (docs/scale-out.md): fetch the epic and the story's
pushed branch into the node's clone, run the story pipeline there, push the story branch after
every task, and hand every event and the story's files back to the runner, which merges.

The node's host (`node.py`'s `NodeHost`) is what the lanes of a run share on the node; the lane
sees it through `LaneHost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import statistics
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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
from flowd.events.model import Event, Info, StoryStatusChanged, TaskCompleted
from flowd.plan.model import Story, StoryPlan
from flowd.roster.pool import RosterPool
from flowd.sandbox.confine import active
from flowd.store.config import Settings
from flowd.trace.view import RunView
from flowd.vcs.gitcli import GitError, run_git
from flowd.vcs.gitops import Repo


class LaneHost(Protocol):
    """What a lane uses of its node's host: the clone and its lock, the pool, ports, detection."""

    @property
    def cache(self) -> Path: ...

    @property
    def clone(self) -> Path: ...

    @property
    def lock(self) -> AbstractContextManager[None]: ...

    @property
    def paths(self) -> EpicPaths: ...

    @property
    def ports(self) -> PortSlots: ...

    def ensure_clone(self) -> Repo: ...

    def pool(self) -> RosterPool: ...

    def detector(self) -> Detector | None: ...

    def attach(self, story: str, emit: Callable[[Event], None]) -> None: ...

    def detach(self, story: str) -> None: ...


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
PUSH = "push"  # a marker in the lane's queue: push the story branch before what follows goes out


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

    def __init__(self, host: LaneHost, spec: LaneSpec, post: Callable[[LaneMessage], None]) -> None:
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
                self._post((PUSH, None, time.time()))
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
            confinement.close()
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
        if self.ctx.detect is not None:
            await self.ctx.detect.seen(self.story.id)  # the node's clone scanned after its last step
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


async def drained(
    queue: asyncio.Queue[LaneMessage], task: asyncio.Task[Any]
) -> AsyncIterator[list[LaneMessage]]:
    """What `task` posts to `queue`, a batch at a time (one Ray object each, not one per
    message), until it has ended and all is out; closing this early (the runner gave up on the
    work: a discarded candidate, a lost lane) cancels `task` too."""
    try:
        while not (task.done() and queue.empty()):
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            batch = [getter.result()] if getter in done else []
            if getter not in done:
                getter.cancel()
            while not queue.empty():
                batch.append(queue.get_nowait())
            if batch:
                yield batch
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
