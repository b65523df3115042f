"""A merge candidate's epic gates on a cluster node (docs/scale-out.md, "Candidate gates on the
cluster"): fetch the candidate the runner pushed, check it out in one of the node's candidate
slots, run the epic gates there under the node's confinement, and hand their events and the
first red gate back to the runner, which decides (the train stays the runner's).

Slots are laid out as the runner's (`<lane cache>/wt/<epic>/_train/w<n>/_epic`), so the node's
confinement and detection treat a candidate as they do on the runner, and a slot used before
is checked out again rather than made anew: only what differs between candidates is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from flowd.base import layout
from flowd.engine.bootstrap import bootstrap_files
from flowd.engine.confinement import run_confinement
from flowd.engine.gates import CommandRun, run_gates
from flowd.engine.lanes.node_lane import FETCHED_REFS, LaneHost, LaneMessage, drained
from flowd.events.model import Event
from flowd.sandbox.confine import Confinement, active
from flowd.store.config import Settings
from flowd.vcs.admin import AdminProblem, check_candidate
from flowd.vcs.gitcli import GitError, run_git

GATED = "gated"  # the last message of a candidate's gate run: the first red gate, or None
PLANTED = "planted"  # what its gates wrote in the slot's admin files and objects (put back here)


@dataclass
class GateSpec:
    """One candidate's gate run, as the runner asks it of a node."""

    run_id: str
    epic: str
    cid: int  # the candidate's number in the runner's train
    ref: str  # the remote ref the runner pushed the candidate's tip to
    tip: str
    commands: list[str]
    lane: str | None  # the story a one-story candidate gates for (its events name it)
    settings: Settings
    remote: str


class CandidateSlots:
    """The node's candidate worktrees for one epic: taken by a gate run, given back after it."""

    def __init__(self, lanes_root: Path, epic: str) -> None:
        self.root = lanes_root / epic / layout.TRAIN_DIR
        self._free: list[Path] = []
        self._made = 0

    def take(self) -> Path:
        if self._free:
            return self._free.pop()
        self._made += 1
        return self.root / f"w{self._made}" / layout.EPIC_LANE

    def give_back(self, worktree: Path) -> None:
        self._free.append(worktree)


def check_out(host: LaneHost, spec: GateSpec, worktree: Path) -> list[AdminProblem]:
    """The candidate's tip at `worktree`, detached: fetched under the node's lock (a fetch must
    not overlap a worktree change, node.py's `NodeLock`), then checked out as the runner does.
    A slot used before has its admin files and object store checked first, as the runner checks
    its own (flowd/vcs/admin.py `check_candidate`): what is returned was found and put back,
    marked `earlier` (an earlier candidate's gates left it: never blamed on this one's story)."""
    repo = host.ensure_clone()
    fetched = f"refs/{FETCHED_REFS}/candidates/{spec.run_id}/c{spec.cid}"
    found: list[AdminProblem] = []
    with host.lock:
        run_git(repo.root, ["fetch", "-q", "--no-tags", spec.remote, f"+{spec.ref}:{fetched}"],
                f"fetching merge candidate {spec.cid}")  # fmt: skip
    try:
        if os.path.lexists(worktree / ".git"):
            # What a gate that ran here before left in the slot's admin files (its check after
            # the gates missed it: an actor killed mid-run) is data, never followed.
            found = [replace(p, earlier=True) for p in check_candidate(repo.common_dir, worktree, spec.tip)]
            repo.check_out_detached(worktree, spec.tip)  # a slot used before: only what differs
        else:
            worktree.parent.mkdir(parents=True, exist_ok=True)
            repo.worktree_add_detached(worktree, spec.tip, reclaim=True)  # takes the node's lock
    finally:
        with contextlib.suppress(GitError):
            run_git(repo.root, ["update-ref", "-d", fetched], "tidying the fetched refs")
    return found


async def gate_candidate(
    host: LaneHost, slots: CandidateSlots, spec: GateSpec
) -> AsyncIterator[list[LaneMessage]]:
    """The gate run's messages in batches: its events as they happen, then what the gates wrote
    in the slot's admin files and object store (`PLANTED`, put back here, reported by the
    runner's train as it reports its own candidates'), `GATED` last."""
    worktree = slots.take()
    key = f"{layout.EPIC_LANE}#c{spec.cid}"
    queue: asyncio.Queue[LaneMessage] = asyncio.Queue()
    confinement: Confinement | None = None
    try:
        repo = await asyncio.to_thread(host.ensure_clone)
        found = await asyncio.to_thread(check_out, host, spec, worktree)
        # The node clone stands for the user's checkout: its ignored files the gates need.
        await asyncio.to_thread(bootstrap_files, repo, spec.settings, worktree)
        env = host.ports.take(key, spec.lane or layout.EPIC_LANE).env()

        def emit(event: Event) -> None:
            queue.put_nowait(("event", event, time.time()))

        confinement = run_confinement(repo, spec.settings, host.cache / "wt", spec.epic, host.paths, emit)
        with active(confinement):
            task = asyncio.create_task(
                run_gates(
                    spec.commands, worktree, where="epic", lane=spec.lane, emit=emit,
                    log_dir=host.paths.root / "train" / spec.run_id / f"c{spec.cid}",
                    timeout_s=spec.settings.gate_timeout_s, env=env, retries=0,
                )
            )  # fmt: skip
        try:
            async for batch in drained(queue, task):
                yield batch
        finally:
            # Before anything of flowd's reads the slot again (the same checks as the runner's
            # train, docs/merging.md): put back, thrown away, whether the run ended or was dropped.
            after = asyncio.to_thread(check_candidate, repo.common_dir, worktree, spec.tip)
            found += await asyncio.shield(after)
        red: CommandRun | None = task.result()
        if found:
            yield [(PLANTED, found, time.time())]
        yield [(GATED, red, time.time())]
    finally:
        if confinement is not None:
            confinement.close()  # the temp folder of a process started where no lane is
        host.ports.release(key)
        slots.give_back(worktree)


__all__ = ["GATED", "PLANTED", "CandidateSlots", "GateSpec", "gate_candidate"]
