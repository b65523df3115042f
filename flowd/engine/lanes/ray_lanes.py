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
from typing import Any

from flowd.config import load_roster
from flowd.engine.context import RunContext
from flowd.engine.core.failure import StoryFacts, outcome_of
from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.core.placement import GiveUp, after_lost, least_loaded
from flowd.engine.core.stops import Halt
from flowd.engine.lanes.node import LaneMessage, LaneSpec, NodeLane
from flowd.engine.state import StoryState, load_state, save_state
from flowd.engine.story import StoryRun
from flowd.errors import EXIT_HALTED, FlowdError, InputError
from flowd.events import Event, Info, LanePlaced, StoryStatusChanged
from flowd.fsio import write_text_atomic
from flowd.gitops import GitError, Repo, _git
from flowd.plan.hashing import story_hash


class LaneHost:
    """The Ray actor on one node that runs its lanes: each `run` call is one lane placement, run
    concurrently with the others on its asyncio loop (as the local engine runs lanes), so a lane
    costs no process start-up of its own (docs/scale-out.md: figures)."""

    def ready(self) -> str:
        import ray

        node_id: str = ray.get_runtime_context().get_node_id()
        return node_id

    async def run(self, spec: LaneSpec) -> Any:
        """An async generator of `LaneMessage`s: ("placed", node name) first, ("outcome", ...) last."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        queue: asyncio.Queue[LaneMessage] = asyncio.Queue()
        yield ("placed", f"{socket.gethostname()}/{node_id[:8]}")
        task = asyncio.create_task(NodeLane(spec, node_id, queue.put_nowait).run())
        while True:
            getter = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                yield getter.result()
                continue
            getter.cancel()
            while not queue.empty():
                yield queue.get_nowait()
            yield ("outcome", task.result())
            return


class LaneLost(Exception):
    """The worker or node running a lane died (or could not be reached) mid-story."""


class RayLanes:
    """The runner's side of lanes on Ray: placement, the event stream, re-placement, the merge."""

    def __init__(self, ctx: RunContext, ray: Any, remote_url: str) -> None:
        self.ctx, self.ray, self.remote_url = ctx, ray, remote_url
        self.roster = load_roster(ctx.repo.root)  # the run's roster, as the runner validated it
        self.host_class = ray.remote(LaneHost)
        self.hosts: dict[str, Any] = {}  # Ray node id → its LaneHost
        self.load: dict[str, int] = {}  # Ray node id → lanes placed there now

    @classmethod
    async def connect(cls, ctx: RunContext) -> RayLanes:
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
        return cls(ctx, ray, remote_url)

    async def aclose(self) -> None:
        for host in list(self.hosts.values()):
            with contextlib.suppress(Exception):
                self.ray.kill(host)
        self.hosts.clear()
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
            shown = outcome.status if outcome.status in ("done", "failed") else "waiting"
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
        placements = 1
        while True:
            async with ctx.merge_lock:  # the epic as the gates last passed it
                await asyncio.to_thread(self._push_epic)
            try:
                outcome = await self._place(story)
            except LaneLost as exc:
                await self._prune()
                decision = after_lost(placements, str(exc))
                if isinstance(decision, GiveUp):
                    ctx.emit(StoryStatusChanged(story=story, status="failed", reason=decision.reason))
                    return StoryOutcome(story, "failed", reason=decision.reason)
                placements = decision.attempt
                ctx.emit(
                    Info(lane=story, message=f"lane lost ({exc}); placing it again (placement {placements})")
                )
                continue
            if outcome.status != "done":
                return outcome
            return await self._merge(story, outcome)

    def _push_epic(self) -> None:
        branch = self.ctx.epic_branch
        try:
            _git(self.ctx.repo.root, ["push", "-q", "--force", self.remote_url, f"{branch}:refs/heads/{branch}"],
                 f"pushing {branch}")  # fmt: skip
        except GitError as exc:
            raise Halt(f"the remote {self.remote_url} refused the push of {branch} ({exc}); "
                       "fix `[lanes] remote` in .flow/config.toml or the remote's permissions, then run again")  # fmt: skip

    def _spec(self, story: str) -> LaneSpec:
        ctx = self.ctx
        scripts: dict[str, tuple[str, str]] = {}
        for entry in self.roster.executors:
            if entry.script_path is not None and entry.script_path.is_file():
                scripts[entry.id] = (entry.script_path.name, entry.script_path.read_text(encoding="utf-8"))
        checkpoint = ctx.paths.checkpoint(story)
        return LaneSpec(
            run_id=ctx.run_id, plan=ctx.plan, story=story, settings=ctx.settings, roster=self.roster,
            scripts=scripts, remote=self.remote_url, state=load_state(ctx.paths, story),
            checkpoint=checkpoint.read_text(encoding="utf-8") if checkpoint.is_file() else None,
            story_budget_usd=ctx.story_budget_usd,
        )  # fmt: skip

    async def _host(self) -> tuple[str, Any]:
        """The least loaded live node's host; a host per live node, started when first needed."""
        ray = self.ray
        nodes = await asyncio.to_thread(ray.nodes)
        alive = {n["NodeID"] for n in nodes if n.get("Alive")}
        for gone in set(self.hosts) - alive:
            self._drop(gone)
        for node_id in alive - set(self.hosts):
            strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(node_id, soft=False)
            self.hosts[node_id] = self.host_class.options(
                scheduling_strategy=strategy, num_cpus=0, max_restarts=0, max_concurrency=1000
            ).remote()
        node_id = least_loaded(self.load, sorted(self.hosts))
        if node_id is None:
            raise Halt("the Ray cluster has no live node to place lanes on; add one, then run again")
        return node_id, self.hosts[node_id]

    async def _prune(self) -> None:
        """After a loss: forget every host that no longer answers (a killed worker, a dead node)."""
        for node_id, host in list(self.hosts.items()):
            try:
                await asyncio.wait_for(host.ready.remote(), timeout=60)
            except Exception:
                self._drop(node_id, host)

    def _drop(self, node_id: str, host: Any = None) -> None:
        """Forget a host whose node left or whose process died (killed for good: it is ours)."""
        if host is not None and self.hosts.get(node_id) is not host:
            return
        dead = self.hosts.pop(node_id, None)
        if dead is not None:
            with contextlib.suppress(Exception):
                self.ray.kill(dead)

    async def _place(self, story: str) -> StoryOutcome:
        """One placement: the lane's stream until its outcome; LaneLost when its worker or node dies."""
        ray = self.ray
        node_id, host = await self._host()
        self.load[node_id] = self.load.get(node_id, 0) + 1
        try:
            stream = host.run.options(num_returns="streaming").remote(self._spec(story))
            async for ref in stream:
                kind, body = await ref
                if kind == "outcome":
                    assert isinstance(body, StoryOutcome)
                    return body
                self._take(story, kind, body)
            raise LaneLost("the lane ended without an outcome")
        except ray.exceptions.RayTaskError as exc:  # flowd's own error on the node: the story's outcome
            reason = f"its lane failed on the node: {exc.cause if exc.cause is not None else exc}"
            self.ctx.emit(StoryStatusChanged(story=story, status="failed", reason=reason[:2000]))
            return StoryOutcome(story, "failed", reason=reason)
        except ray.exceptions.RayError as exc:
            self._drop(node_id, host)
            raise LaneLost(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        finally:
            self.load[node_id] -= 1

    def _take(self, story: str, kind: str, body: object) -> None:
        ctx = self.ctx
        if kind == "placed":
            ctx.emit(LanePlaced(lane=story, engine="ray", node=str(body)))
        elif kind == "event":
            ctx.emit(_event(body))
        elif kind == "files" and isinstance(body, dict):
            if isinstance(body.get("state"), str):
                state = StoryState.model_validate_json(body["state"])
                # The runner's copy names where the story would live here (`flowd clean`, a local rerun).
                save_state(ctx.paths, state.model_copy(update={"worktree": str(ctx.story_worktree(story))}))
            if isinstance(body.get("checkpoint"), str):
                write_text_atomic(ctx.paths.checkpoint(story), body["checkpoint"])

    async def _merge(self, story: str, outcome: StoryOutcome) -> StoryOutcome:
        """The node pushed a finished story: fetch it and merge it here, behind the epic gates."""
        ctx = self.ctx
        branch = ctx.story_branch(story)
        try:
            await asyncio.to_thread(
                _git, ctx.repo.root, ["fetch", "-q", self.remote_url, f"+refs/heads/{branch}:refs/heads/{branch}"],
                f"fetching {branch}",
            )  # fmt: skip
        except GitError as exc:
            reason = f"could not fetch {branch} from {self.remote_url}: {exc}"
            ctx.emit(StoryStatusChanged(story=story, status="failed", reason=reason))
            return StoryOutcome(story, "failed", reason=reason, branch=branch)
        return await StoryRun(ctx, ctx.plan.require(story)).merge_pushed(outcome)


def _event(body: object) -> Event:
    return body  # type: ignore[return-value]  # an Event object, unpickled as it was built on the node


def resolve_remote(repo: Repo, remote: str) -> str:
    """A remote name of the runner's repository, or a URL or path, as a URL every node can use."""
    if "://" in remote or remote.startswith("/") or "@" in remote:
        return remote
    try:
        url = _git(repo.root, ["remote", "get-url", remote], f"reading remote {remote!r}").stdout.strip()
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


__all__ = ["LaneHost", "RayLanes", "resolve_remote"]
