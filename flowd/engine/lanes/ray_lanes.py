"""Story lanes on a Ray cluster (docs/scale-out.md): `[lanes] engine = "ray"`.

Per story: the runner pushes `epic/<id>` to the remote, places the lane on the least loaded
node's `LaneHost` (one actor process per node, started when first needed), and folds the messages
it streams back: events into the run's trace (the runner is their only writer), the story's state
and task checkpoint into the runner's `.flow` (the resume point), and finally the outcome. A story the node finished is fetched from the remote and merged here,
behind the epic gates, like a local one. A lane whose worker or node dies is placed again and
resumes from its last pushed commit. Actors are owned by this process: Ray ends them when the run
ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import time
from typing import Any

from flowd.base.errors import EXIT_HALTED, FlowdError, InputError
from flowd.base.fsio import write_text_atomic
from flowd.engine.context import RunContext
from flowd.engine.core.approval import approval_due
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.placement import Node, PlacementsSpent, after_lost, lane_nodes, least_loaded, trusted
from flowd.engine.core.revision import rounds_not_counted
from flowd.engine.core.stops import AwaitingApproval, Halt
from flowd.engine.lanes.node import HostSpec, NodeHost
from flowd.engine.lanes.node_gates import GateSpec
from flowd.engine.lanes.node_lane import LaneSpec
from flowd.engine.lanes.ray_gates import ClusterGates
from flowd.engine.state import StoryState, append_findings, load_state, save_state
from flowd.engine.story import StoryRun
from flowd.events.model import Event, Info, LanePlaced, StoryStatusChanged
from flowd.events.statuses import lane_status_of
from flowd.plan.hashing import story_hash
from flowd.store.config import load_roster
from flowd.tasks.checkpoint import parse_checkpoint
from flowd.tasks.model import TaskPlan
from flowd.vcs.gitcli import GitError, run_git
from flowd.vcs.gitops import Repo


class LaneHost:
    """The Ray actor on one node that runs a run's lanes there: each `run` call is one lane
    placement, run concurrently with the others on its asyncio loop (as the local engine runs
    lanes), so a lane costs no process start-up of its own; its `NodeHost` keeps the clone and one
    roster pool whose agents stay warm across lanes (docs/scale-out.md)."""

    def __init__(self, spec: HostSpec) -> None:
        import ray

        self.node_id: str = ray.get_runtime_context().get_node_id()
        self.node = NodeHost(spec, self.node_id)

    def ready(self) -> str:
        return self.node_id

    async def warm(self) -> None:
        await self.node.warm()

    async def run(self, spec: LaneSpec) -> Any:
        """An async generator of batches of `LaneMessage`s: ("placed", node name) first, ("outcome", ...) last."""
        yield [("placed", f"{socket.gethostname()}/{self.node_id[:8]}", time.time())]
        async for batch in self.node.stream(spec):
            yield batch

    async def gate(self, spec: GateSpec) -> Any:
        """An async generator of batches: ("placed", node name) first, a merge candidate's gate
        events, `GATED` last."""
        yield [("placed", f"{socket.gethostname()}/{self.node_id[:8]}", time.time())]
        async for batch in self.node.gate(spec):
            yield batch

    async def close(self) -> None:
        """Close the node's agents (the runner kills the actor right after)."""
        await self.node.aclose()


class LaneLost(Exception):
    """The worker or node running a lane died (or could not be reached) mid-story."""


class RayPlacement:
    """The runner's side of lanes on Ray: placement, the event stream, re-placement, the merge."""

    def __init__(self, ctx: RunContext, ray: Any, remote_url: str, prestart: int = 0) -> None:
        self.ctx, self.ray, self.remote_url = ctx, ray, remote_url
        self.roster = load_roster(ctx.repo.root)  # the run's roster, as the runner validated it
        self.host_class = ray.remote(LaneHost)
        self.hosts: dict[str, Any] = {}  # Ray node id → its LaneHost
        self.load: dict[str, int] = {}  # Ray node id → lanes placed there now
        self.lost: dict[str, float] = {}  # Ray node id → when a lane placed there was lost
        self.prestart = prestart  # agent clones each node starts before its first lane
        self.epic_pushed: str | None = None  # the epic commit the remote has (pushed by this run)
        self.gates: ClusterGates | None = None  # `candidateGates = "cluster"` (ray_gates.py)

    @classmethod
    async def connect(cls, ctx: RunContext, prestart: int = 0) -> RayPlacement:
        try:
            import ray
        except ImportError:
            raise InputError(
                '`[lanes] engine = "ray"` in .flow/config.toml needs Ray: '
                "install it with `pip install 'flowd[ray]'`, or set `engine = \"local\"`"
            )
        remote_url = await asyncio.to_thread(resolve_remote, ctx.repo, ctx.settings.lanes.remote)
        # In the main thread: Ray installs its signal handlers there (nothing else runs yet).
        _init(ray, ctx.settings.lanes.address)
        ctx.emit(
            Info(message=f"lanes on the Ray cluster at {ctx.settings.lanes.address}, remote {remote_url}")
        )
        lanes = cls(ctx, ray, remote_url)
        # Every node's host starts now, cloning and starting the first lanes' agents while the
        # runner pushes the epic: a lane placed on a warm node starts no process.
        nodes = await lanes._nodes()
        lanes.prestart = -(-prestart // max(1, len(nodes)))
        for node_id in nodes:
            lanes._start_host(node_id)
        with contextlib.suppress(Halt):  # a refusing remote is said by the first story, which waits
            await asyncio.to_thread(lanes._push_epic)
        if ctx.settings.lanes.candidate_gates == "cluster":
            lanes.gates = ClusterGates(lanes)
            ctx.merge_train().elsewhere = lanes.gates
        return lanes

    def make_ahead(self, story: str) -> None:
        """Nothing: a lane on the cluster is placed whole when it launches (docs/scale-out.md)."""

    async def aclose(self) -> None:
        if self.gates is not None:
            await self.gates.aclose()
        hosts = list(self.hosts.values())
        self.hosts.clear()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*(h.close.remote() for h in hosts), return_exceptions=True), 10
            )
        for host in hosts:
            with contextlib.suppress(Exception):
                self.ray.kill(host)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.ray.shutdown)

    async def run(self, story: str) -> StoryOutcome:
        try:
            return await self._run(story)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The runner's own part failed (a remote refusing the epic, git): the failure policy says how.
            outcome = outcome_of(exc, StoryFacts(story, self.ctx.story_branch(story), []))
            shown = lane_status_of(outcome.status)
            self.ctx.emit(StoryStatusChanged(story=story, status=shown, reason=outcome.reason))
            return outcome

    async def _run(self, story: str) -> StoryOutcome:
        ctx = self.ctx
        state = load_state(ctx.paths, story)
        if (
            state is not None
            and state.status == "merged"
            and state.hash == story_hash(ctx.plan.require(story))
        ):
            return await StoryRun(ctx, ctx.plan.require(story)).run()  # skipped (and cleaned up) here
        # A story that failed before gets a fresh allowance of merge revisions (engine/core/revision.py).
        rounds_before = rounds_not_counted(self._plan(story), state.status if state is not None else None)
        placements = 1
        while True:
            timing: dict[str, float] = {}
            asked = time.monotonic()
            async with ctx.merge_lock:  # the epic as the gates last passed it
                timing["epicPushWait"] = time.monotonic() - asked
                timing["epicPush"] = await asyncio.to_thread(self._push_epic)
            try:
                outcome = await self._place(story, timing)
            except LaneLost as exc:
                await self._prune()
                decision = after_lost(placements, str(exc))
                if isinstance(decision, PlacementsSpent):
                    ctx.emit(StoryStatusChanged(story=story, status="failed", reason=decision.reason))
                    return StoryOutcome(story, "failed", reason=decision.reason)
                placements = decision.attempt
                ctx.emit(
                    Info(lane=story, message=f"lane lost ({exc}); placing it again (placement {placements})")
                )
                continue
            if outcome.status != "done":
                self._say_timing(story, timing)
                return outcome
            waiting = self._awaiting_approval(story, outcome)
            if waiting is not None:
                self._say_timing(story, timing)
                return waiting
            merged = await self._merge(story, outcome, rounds_before, timing)
            self._say_timing(story, timing)
            if merged is not None:
                return merged
            # A red merge reopened the story with a merge revision task: its lane goes out again.

    def _awaiting_approval(self, story: str, pushed: StoryOutcome) -> StoryOutcome | None:
        """The hook before the merge queue (`pauseOn` `merge`, docs/answers.md), on the runner: a
        pushed story its approval does not cover waits `ready` (the rule is engine/core/approval.py's;
        the node never asks). The answer's approval or revision task is in the runner's copies of
        its state and checkpoint, which its next placement takes."""
        state = load_state(self.ctx.paths, story)
        tasks = len(self._plan(story).tasks)
        if not approval_due(self.ctx.pause_on, state.approved if state is not None else None, tasks):
            return None
        return StoryRun(self.ctx, self.ctx.plan.require(story)).stopped_by(
            AwaitingApproval(tasks), pushed.executors
        )

    def _plan(self, story: str) -> TaskPlan:
        path = self.ctx.paths.checkpoint(story)
        try:
            return parse_checkpoint(path.read_text(encoding="utf-8"), str(path))
        except (OSError, ValueError):
            return TaskPlan(story_id=story)

    def _push_epic(self) -> float:
        """Push the epic (call under the merge lock) unless the remote has it from this run; its seconds."""
        branch = self.ctx.epic_branch
        head = self.ctx.repo.rev_parse(branch)
        if head is not None and head == self.epic_pushed:
            return 0.0
        started = time.monotonic()
        try:
            run_git(self.ctx.repo.root, ["push", "-q", "--force", self.remote_url, f"{branch}:refs/heads/{branch}"],
                    f"pushing {branch}")  # fmt: skip
        except GitError as exc:
            raise Halt(f"the remote {self.remote_url} refused the push of {branch} ({exc}); "
                       "fix `[lanes] remote` in .flow/config.toml or the remote's permissions, then run again")  # fmt: skip
        self.epic_pushed = head
        return time.monotonic() - started

    def _spec(self, story: str) -> LaneSpec:
        ctx = self.ctx
        checkpoint = ctx.paths.checkpoint(story)
        return LaneSpec(
            run_id=ctx.run_id, plan=ctx.plan, story=story, settings=ctx.settings, remote=self.remote_url,
            state=load_state(ctx.paths, story),
            checkpoint=checkpoint.read_text(encoding="utf-8") if checkpoint.is_file() else None,
            story_budget_usd=ctx.story_budget_usd,
        )  # fmt: skip

    def _host_spec(self) -> HostSpec:
        scripts: dict[str, tuple[str, str]] = {}
        for entry in self.roster.executors:
            if entry.script_path is not None and entry.script_path.is_file():
                scripts[entry.id] = (entry.script_path.name, entry.script_path.read_text(encoding="utf-8"))
        ctx = self.ctx
        return HostSpec(
            run_id=ctx.run_id, epic=ctx.epic_id, remote=self.remote_url, roster=self.roster, scripts=scripts,
            settings=ctx.settings, prestart=self.prestart,
        )  # fmt: skip

    async def _nodes(self) -> list[str]:
        """The live nodes lanes may go to (engine/core/placement.py)."""
        nodes = [n for n in await asyncio.to_thread(self.ray.nodes) if n.get("Alive")]
        return lane_nodes([Node(n["NodeID"], float((n.get("Resources") or {}).get("CPU", 0))) for n in nodes])

    def _start_host(self, node_id: str) -> None:
        ray = self.ray
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)
        host = self.host_class.options(
            scheduling_strategy=strategy, num_cpus=0, max_restarts=0, max_concurrency=1000
        ).remote(self._host_spec())
        host.warm.remote()  # its failure shows in the first lane placed there
        self.hosts[node_id] = host

    async def pick_host(self) -> tuple[str, Any]:
        """The least loaded live node's host; a host per live node, started when first needed."""
        alive = await self._nodes()
        for gone in set(self.hosts) - set(alive):
            self.drop_host(gone)
        candidates = trusted(alive, self.lost, time.monotonic())
        for missing in set(candidates) - set(self.hosts):
            self._start_host(missing)
        node_id = least_loaded(self.load, candidates)
        if node_id is None:
            raise Halt("the Ray cluster has no live node to place lanes on; add one, then run again")
        return node_id, self.hosts[node_id]

    async def _prune(self) -> None:
        """After a loss: forget every host that no longer answers (a killed worker, a dead node)."""
        for node_id, host in list(self.hosts.items()):
            try:
                await asyncio.wait_for(host.ready.remote(), timeout=60)
            except Exception:
                self.drop_host(node_id, host)

    def drop_host(self, node_id: str, host: Any = None) -> None:
        """Forget a host whose node left or whose process died (killed for good: it is ours)."""
        if host is not None and self.hosts.get(node_id) is not host:
            return
        dead = self.hosts.pop(node_id, None)
        if dead is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(dead)

    async def _place(self, story: str, timing: dict[str, float]) -> StoryOutcome:
        """One placement: the lane's stream until its outcome; LaneLost when its worker or node dies."""
        ray = self.ray
        asked = time.monotonic()
        node_id, host = await self.pick_host()
        self.load[node_id] = self.load.get(node_id, 0) + 1
        latencies: list[float] = []
        batches = 0
        try:
            stream = host.run.options(num_returns="streaming").remote(self._spec(story))
            async for ref in stream:
                batch = await ref
                batches += 1
                for kind, body, sent in batch:
                    latencies.append(time.time() - sent)
                    if kind == "placed":
                        timing["place"] = time.monotonic() - asked
                    if kind == "outcome":
                        assert isinstance(body, StoryOutcome)
                        timing.update(_stream_timing(latencies, batches))
                        return body
                    self._take(story, kind, body, timing)
            raise LaneLost("the lane ended without an outcome")
        except ray.exceptions.RayTaskError as exc:  # flowd's own error on the node: the story's outcome
            reason = f"its lane failed on the node: {exc.cause if exc.cause is not None else exc}"
            self.ctx.emit(StoryStatusChanged(story=story, status="failed", reason=reason[:2000]))
            return StoryOutcome(story, "failed", reason=reason)
        except ray.exceptions.RayError as exc:
            self.drop_host(node_id, host)
            self.lost[node_id] = time.monotonic()
            raise LaneLost(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        finally:
            self.load[node_id] -= 1

    def _take(self, story: str, kind: str, body: object, timing: dict[str, float]) -> None:
        ctx = self.ctx
        if kind == "placed":
            ctx.emit(LanePlaced(lane=story, engine="ray", node=str(body)))
        elif kind == "event":
            ctx.emit(_event(body))
        elif kind == "timing" and isinstance(body, dict):
            timing.update(body)
        elif kind == "files" and isinstance(body, dict):
            if isinstance(body.get("state"), str):
                state = StoryState.model_validate_json(body["state"])
                # The runner's copy names where the story would live here (`flowd clean`, a local rerun).
                save_state(ctx.paths, state.model_copy(update={"worktree": str(ctx.story_worktree(story))}))
            if isinstance(body.get("checkpoint"), str):
                write_text_atomic(ctx.paths.checkpoint(story), body["checkpoint"])
            if isinstance(body.get("findings"), str):
                append_findings(ctx.paths, story, body["findings"])

    async def _merge(
        self, story: str, outcome: StoryOutcome, rounds_before: int, timing: dict[str, float]
    ) -> StoryOutcome | None:
        """The node pushed a finished story: fetch it and merge it here, behind the epic gates.
        None: the merge was red and undone, and the story is reopened with a merge revision task."""
        ctx = self.ctx
        branch = ctx.story_branch(story)
        started = time.monotonic()
        try:
            await asyncio.to_thread(
                run_git, ctx.repo.root, ["fetch", "-q", self.remote_url, f"+refs/heads/{branch}:refs/heads/{branch}"],
                f"fetching {branch}",
            )  # fmt: skip
        except GitError as exc:
            reason = f"could not fetch {branch} from {self.remote_url}: {exc}"
            ctx.emit(StoryStatusChanged(story=story, status="failed", reason=reason))
            return StoryOutcome(story, "failed", reason=reason, branch=branch)
        timing["fetch"] = time.monotonic() - started
        run = StoryRun(ctx, ctx.plan.require(story))
        started = time.monotonic()
        try:
            # A red merge is answered as a local story's is (StoryRun.reopen_after_red); here the
            # revision task goes into the runner's checkpoint copy, which the next placement takes.
            return await run.merge_pushed(outcome, self._plan(story), rounds_before)
        finally:
            timing["merge"] = time.monotonic() - started

    def _say_timing(self, story: str, timing: dict[str, float]) -> None:
        """Where the placement's time went (docs/scale-out.md: figures): one line, seconds."""
        shown = " ".join(f"{key}={value:.3f}" for key, value in timing.items())
        self.ctx.emit(Info(lane=story, message=f"lane timing (s): {shown}"))


def _stream_timing(latencies: list[float], batches: int) -> dict[str, float]:
    return {
        "streamMedian": statistics.median(latencies) if latencies else 0.0,
        "streamMax": max(latencies, default=0.0),
        "messages": float(len(latencies)),
        "batches": float(batches),
    }


def _event(body: object) -> Event:
    return body  # type: ignore[return-value]  # an Event object, unpickled as it was built on the node


def resolve_remote(repo: Repo, remote: str) -> str:
    """A remote name of the runner's repository, or a URL or path, as a URL every node can use."""
    if "://" in remote or remote.startswith("/") or "@" in remote:
        return remote
    try:
        url = run_git(repo.root, ["remote", "get-url", remote], f"reading remote {remote!r}").stdout.strip()
    except GitError:
        candidate = (repo.root / remote).resolve()
        if candidate.exists():
            return str(candidate)
        raise InputError(
            f"`[lanes] remote = {remote!r}` in .flow/config.toml is neither a remote of {repo.root} "
            "nor a URL; add it with `git remote add`, or name a URL every node can reach"
        )
    if "://" in url or url.startswith("/") or "@" in url:
        return url
    return str((repo.root / url).resolve())  # a relative path: nodes get it absolute


def _init(ray: Any, address: str) -> None:
    """Connect this process to the cluster as its driver; "auto" falls back to a local instance."""
    options: dict[str, Any] = {"namespace": "flowd", "log_to_driver": False, "configure_logging": False}
    given = os.environ.get("RAY_ADDRESS") if address == "auto" else address
    if given and "://" not in given:
        _reachable(given)  # Ray itself retries a dead address for minutes
    try:
        if address == "auto":
            try:
                ray.init(address="auto", **options)
            except ConnectionError:
                ray.init(**options)  # no running cluster: a local instance, as Ray's own "auto" would not
        else:
            ray.init(address=address, **options)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _Unreachable(
            f"could not reach the Ray cluster at {address!r} ({first}); start it, or fix `[lanes] address` "
            "in .flow/config.toml, then run again"
        )


def _reachable(address: str) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=10):
            return
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _Unreachable(
            f"could not reach the Ray cluster at {address!r} ({why}); start it, or fix `[lanes] address` "
            "in .flow/config.toml (or RAY_ADDRESS), then run again"
        )


class _Unreachable(FlowdError):
    exit_code = EXIT_HALTED


__all__ = ["LaneHost", "RayPlacement", "resolve_remote"]
