"""A story lane on a cluster node (docs/scale-out.md): clone the remote (cached per node), make the
story worktree, run the story pipeline there with the roster's agents and the gates, push the
story branch after every task, and hand every event back to the runner.

This module runs inside a Ray actor on any node; it imports nothing of Ray, so the lane itself is
plain flowd (the actor wrapper is `flowd/engine/lanes/ray_lanes.py`'s). The runner stays the only
writer of the trace and the only merger: a lane stops where a local story would merge, with its
branch pushed to the remote.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from flowd.config import Roster, Settings
from flowd.cost.prices import pricer
from flowd.engine.context import RunContext
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.stops import Halt
from flowd.engine.state import EpicPaths, StoryState, save_state
from flowd.engine.story import StoryRun
from flowd.events import Event, TaskCompleted
from flowd.fsio import write_text_atomic
from flowd.gitops import GitError, Repo, _git
from flowd.plan.model import Story, StoryPlan
from flowd.roster import RosterPool
from flowd.view import RunView


@dataclass
class LaneSpec:
    """Everything a node needs to run one story: sent by the runner with each placement."""

    run_id: str
    plan: StoryPlan
    story: str
    settings: Settings
    roster: Roster
    scripts: dict[str, tuple[str, str]]  # executor id → (file name, text) of its script
    remote: str  # a URL every node can reach
    state: StoryState | None = None  # the runner's copy: the resume point
    checkpoint: str | None = None  # the task checkpoint the runner holds
    story_budget_usd: float | None = None


@dataclass
class Mirror:
    """The story's files in the node's `.flow`, as last sent to the runner (which keeps its own copy)."""

    state: str | None = None
    checkpoint: str | None = None


LaneMessage = tuple[str, object]  # ("event", Event) | ("files", {name: text}) | ("outcome", StoryOutcome)


def lane_cache(node_id: str, remote: str) -> Path:
    """Where this node keeps its clone of `remote` and its worktrees (one per node and remote)."""
    base = os.environ.get("FLOWD_LANE_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowd" / "lanes"
    )
    key = hashlib.sha256(remote.encode()).hexdigest()[:12]
    return Path(base) / node_id[:16] / key


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Lanes on one node share its clone: fetches and worktree changes take turns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class NodeLane:
    """One placement of one story on this node; `post` hands a message to the runner's stream."""

    def __init__(self, spec: LaneSpec, node_id: str, post: Callable[[LaneMessage], None]) -> None:
        self.spec, self.post = spec, post
        self.cache = lane_cache(node_id, spec.remote)
        self.clone = self.cache / "repo"
        self.epic = spec.plan.epic_id
        self.branch = f"story/{self.epic}/{spec.story}"
        self.worktree = self.cache / "wt" / self.epic / spec.story
        self.paths = EpicPaths(self.clone, self.epic)
        self.mirror = Mirror()

    def _git(self, *args: str, what: str) -> str:
        return _git(self.clone, args, what).stdout

    def prepare(self) -> None:
        """Clone or refresh the node's copy; the story's branch and files as the runner knows them."""
        remote = self.spec.remote
        with _locked(self.cache / "lock"):
            if not (self.clone / ".git").exists():
                shutil.rmtree(self.clone, ignore_errors=True)
                self.clone.parent.mkdir(parents=True, exist_ok=True)
                _git(self.clone.parent, ["clone", "-q", "--no-checkout", remote, str(self.clone)],
                     f"cloning {remote} on this node")  # fmt: skip
            # The truth is on the remote: a worktree an earlier placement left here is disposable.
            if (self.worktree / ".git").exists():
                with contextlib.suppress(GitError):
                    self._git(
                        "worktree", "remove", "--force", str(self.worktree), what="removing a stale worktree"
                    )
            shutil.rmtree(self.worktree, ignore_errors=True)
            self._git("worktree", "prune", what="pruning worktrees")
            epic = f"epic/{self.epic}"
            self._git("fetch", "-q", remote, f"+refs/heads/{epic}:refs/heads/{epic}", what=f"fetching {epic}")
            pushed = self._git("ls-remote", "--heads", remote, self.branch, what="listing the remote").strip()
            if pushed:
                self._git("fetch", "-q", remote, f"+refs/heads/{self.branch}:refs/heads/{self.branch}",
                          what=f"fetching {self.branch}")  # fmt: skip
            else:
                self.spec.state = self.spec.checkpoint = None  # nothing was pushed: nothing to resume
                if self._has_branch():
                    self._git("branch", "-D", self.branch, what="dropping a stale branch")
        Repo(self.clone).ensure_flow_excluded()
        self._write_story_files()

    def _has_branch(self) -> bool:
        return bool(self._git("branch", "--list", self.branch, what="listing branches").strip())

    def _write_story_files(self) -> None:
        spec, story = self.spec, self.spec.story
        state_file, checkpoint = self.paths.state(story), self.paths.checkpoint(story)
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

    def roster(self) -> Roster:
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

    def push(self) -> None:
        """The story branch to the remote: the point a lane placed again resumes from."""
        try:
            _git(self.clone, ["push", "-q", "--force", self.spec.remote, f"{self.branch}:refs/heads/{self.branch}"],
                 f"pushing {self.branch}")  # fmt: skip
        except GitError as exc:
            raise Halt(f"the remote {self.spec.remote} refused the push of {self.branch} ({exc}); "
                       "let the runner's machine and every node push there, then run again")  # fmt: skip

    def files(self) -> None:
        """Send the story's state and checkpoint when they changed (the runner resumes from its copy)."""
        story = self.spec.story
        now = Mirror(_read(self.paths.state(story)), _read(self.paths.checkpoint(story)))
        changed = {k: v for k, v in vars(now).items() if v is not None and v != getattr(self.mirror, k)}
        if changed:
            self.mirror = now
            self.post(("files", changed))

    async def run(self) -> StoryOutcome:
        spec, loop = self.spec, asyncio.get_running_loop()
        home = threading.get_ident()
        await asyncio.to_thread(self.prepare)
        view = RunView(run_id=spec.run_id, pricer=pricer(spec.settings))

        def emit(event: Event) -> None:
            if threading.get_ident() != home:  # git work runs in threads and says what it did
                loop.call_soon_threadsafe(emit, event)
                return
            view.apply_event(event)
            # What the event announces is durable first: a task's commit pushed and its checkpoint
            # sent before the runner hears it completed (a lane lost right after resumes past it).
            if isinstance(event, TaskCompleted):
                self.push()
            self.files()
            self.post(("event", event))

        pool = RosterPool(self.roster(), state_path=self.clone / ".flow" / "roster-state.json",
                          emit=emit, log_dir=self.paths.agent_logs())  # fmt: skip
        ctx = RunContext(
            repo=Repo(self.clone), plan=spec.plan, plan_path=self.clone / ".flow" / "plan.json",
            settings=spec.settings, run_id=spec.run_id, epic_wt=self.clone, worktree_root=self.cache / "wt",
            paths=self.paths, pool=pool, emit=emit, view=view, story_budget_usd=spec.story_budget_usd,
        )  # fmt: skip
        try:
            outcome = await _PushingStoryRun(ctx, spec.plan.require(spec.story), self).run()
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(pool.aclose())
        self.files()
        return outcome


class _PushingStoryRun(StoryRun):
    """The story pipeline where a local run would merge: push the branch, leave the merge to the runner."""

    def __init__(self, ctx: RunContext, story: Story, lane: NodeLane) -> None:
        super().__init__(ctx, story)
        self.lane = lane

    async def _merge(self) -> str:
        await asyncio.to_thread(self.lane.push)
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


__all__ = ["LaneMessage", "LaneSpec", "NodeLane", "lane_cache"]
