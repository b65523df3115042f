"""The runner's side of merge candidates gated on the Ray cluster (docs/scale-out.md, "Candidate
gates on the cluster"): `[lanes] candidateGates = "cluster"`.

The train builds each candidate here, as always, and decides what it means; only the gate run
moves. The candidate's tip is pushed to a ref of the remote (`refs/flowd/candidates/<run>/c<n>-<k>`,
deleted after), the least loaded node's `LaneHost` checks it out and runs the epic gates
(`node_gates.py`), and their events come back into this run's trace as they happen. A node that
is lost, a remote that refuses the push, or an error on the node is `NotPlaced`: the train runs
that candidate's gates here instead, saying why, so a cluster never makes the train worse.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

from flowd.engine.context import RunContext
from flowd.engine.core.stops import Halt
from flowd.engine.gates import CommandRun, NotPlaced
from flowd.engine.lanes.node_gates import GATED, PLANTED, GateSpec
from flowd.events.model import Info
from flowd.vcs.admin import AdminProblem
from flowd.vcs.gitcli import GitError, run_git

CANDIDATE_REFS = "refs/flowd/candidates"


class Cluster(Protocol):
    """What candidate gates need of the lanes' placement (ray_lanes.py's `RayPlacement`)."""

    ctx: RunContext
    ray: Any
    remote_url: str
    load: dict[str, int]  # Ray node id → work placed there now
    lost: dict[str, float]  # Ray node id → when work placed there was lost

    async def pick_host(self) -> tuple[str, Any]: ...

    def drop_host(self, node_id: str, host: Any = None) -> None: ...


class ClusterGates:
    """`GatesElsewhere` on the lanes' cluster: one node per candidate gate run."""

    def __init__(self, lanes: Cluster) -> None:
        self.lanes = lanes
        self._tidying: set[asyncio.Future[None]] = set()
        self._runs = 0  # each gate run its own ref: a rerun's push never meets the last one's delete

    async def gate(
        self, cid: int, tip: str, commands: list[str], lane: str | None, found: list[AdminProblem]
    ) -> CommandRun | None:
        ctx = self.lanes.ctx
        self._runs += 1
        ref = f"{CANDIDATE_REFS}/{ctx.run_id}/c{cid}-{self._runs}"
        try:
            await asyncio.to_thread(self._git, ["push", "-q", "--force", self.lanes.remote_url, f"{tip}:{ref}"],
                                    f"pushing merge candidate {cid}")  # fmt: skip
        except GitError as exc:
            raise NotPlaced(f"the remote {self.lanes.remote_url} refused the candidate: {exc}")
        try:
            spec = GateSpec(
                run_id=ctx.run_id, epic=ctx.epic_id, cid=cid, ref=ref, tip=tip, commands=commands,
                lane=lane, settings=ctx.settings, remote=self.lanes.remote_url,
            )  # fmt: skip
            return await self._on_node(spec, found)
        finally:
            self._tidy(ref)

    async def _on_node(self, spec: GateSpec, found: list[AdminProblem]) -> CommandRun | None:
        lanes, ctx = self.lanes, self.lanes.ctx
        ray = lanes.ray
        try:
            node_id, host = await lanes.pick_host()
        except Halt as exc:
            raise NotPlaced(str(exc))
        lanes.load[node_id] = lanes.load.get(node_id, 0) + 1
        stream: Any = None
        try:
            stream = host.gate.options(num_returns="streaming").remote(spec)
            async for ref in stream:
                for kind, body, _sent in await ref:
                    if kind == "placed":
                        ctx.emit(
                            Info(
                                lane=spec.lane,
                                message=f"merge candidate {spec.cid}: epic gates on node {body}",
                            )
                        )
                    elif kind == PLANTED:  # put back on the node; reported by the train
                        found.extend(body if isinstance(body, list) else [])
                    elif kind == GATED:
                        return body if isinstance(body, CommandRun) else None
                    else:
                        ctx.emit(body)
            raise NotPlaced("the node ended the gate run without a verdict")
        except ray.exceptions.RayTaskError as exc:  # flowd's own error on the node (git, the disk)
            raise NotPlaced(f"it failed on the node: {exc.cause if exc.cause is not None else exc}")
        except ray.exceptions.RayError as exc:
            lanes.drop_host(node_id, host)
            lanes.lost[node_id] = time.monotonic()
            raise NotPlaced(f"its node was lost: {type(exc).__name__}")
        except asyncio.CancelledError:
            if stream is not None:  # the train discarded the candidate: its gate is killed there
                with contextlib.suppress(Exception):
                    ray.cancel(stream)
            raise
        finally:
            lanes.load[node_id] -= 1

    async def aclose(self) -> None:
        """The candidates' refs are deleted from the remote before the run ends."""
        if self._tidying:
            await asyncio.gather(*list(self._tidying), return_exceptions=True)

    def _git(self, args: list[str], what: str) -> None:
        run_git(self.lanes.ctx.repo.root, args, what)

    def _tidy(self, ref: str) -> None:
        """Delete the candidate's ref from the remote, off the train's way (best effort)."""
        task = asyncio.ensure_future(asyncio.to_thread(self._delete, ref))
        self._tidying.add(task)
        task.add_done_callback(self._tidying.discard)

    def _delete(self, ref: str) -> None:
        with contextlib.suppress(GitError):
            self._git(["push", "-q", self.lanes.remote_url, f":{ref}"], "deleting a merge candidate's ref")


__all__ = ["CANDIDATE_REFS", "ClusterGates"]
