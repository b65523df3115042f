"""Runs as the server sees them: launched detached, followed through their traces, re-attached.

A run is a `flowd run` process writing `.flow/runs/<runId>/`; the server never drives it, it only
reads. One `watchfiles` watch on the runs directory says when a trace grows or a `run.json`
changes (no polling loop); each run keeps one `RunView` fed by a `TraceFollower`. A process that
dies without ending its run is noticed through a pidfd (the kernel says when it exits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowd.base import layout
from flowd.events.statuses import run_status_of

if TYPE_CHECKING:  # pydantic models: imported on first use, after `initialize` (docs/performance.md)
    import subprocess

    from flowd.engine import runctl
    from flowd.events.model import Envelope
    from flowd.plan.model import StoryPlan
    from flowd.trace.log import RunRecord, TraceFollower
    from flowd.trace.usage import Pricer
    from flowd.trace.view import RunView

log = logging.getLogger(__name__)

# How many finished runs are kept folded for `flow/status` and `flow/perimeter`.
RECENT_FINISHED = 20
# watchfiles groups changes for up to `debounce` ms, checking every `step` ms: small values keep
# the trace-to-notification latency well under 100 ms.
WATCH_DEBOUNCE_MS = 40
WATCH_STEP_MS = 5
# Out of inotify watches (flowd/server/inotify.py), the runs directory is polled: it is small, so
# often enough to keep notifications prompt.
POLL_MS = 100


@dataclass
class Tracked:
    record: RunRecord
    view: RunView
    follower: TraceFollower
    process: subprocess.Popen[bytes] | None = None
    pidfd: int | None = None
    ready: bool = False
    ended: bool = False
    plan: StoryPlan | None = None
    plan_error: str | None = None  # why the plan could not be loaded (it is not retried)
    live: bool = False  # attached while going on: clients were sent its snapshot
    end_notified: bool = False  # its RunEnded was sent (a killed run's end is made up)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def epic_id(self) -> str:
        return self.view.epic_id or self.record.epic_id


class RunHooks:
    """What the server does with a run's life; the default does nothing (tests override)."""

    def attached(self, run: Tracked) -> None:
        """A run's past was folded; its snapshot can be sent."""

    def event(self, run: Tracked, envelope: Envelope) -> None:
        """One new event, already folded into `run.view`."""

    def ended(self, run: Tracked) -> None:
        """The run is over (RunEnded, run.json closed, or its process died)."""

    def watch_polled(self, message: str) -> None:
        """A watch fell back to polling (out of inotify watches): `message` says so, once."""


def _fold_past(follower: TraceFollower, view: RunView) -> None:
    restored = follower.restore(view)
    follower.fold_into(view)
    if not restored:
        follower.checkpoint(view)  # none was valid: the next re-attach starts from this one


class RunManager:
    def __init__(self, repo: Path, hooks: RunHooks, pricer: Pricer | None = None) -> None:
        from flowd.trace.usage import reported_cost

        self.repo = repo
        self.hooks = hooks
        self.pricer = pricer or reported_cost
        self.runs: dict[str, Tracked] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = asyncio.Event()
        self._watching = asyncio.Event()
        self._tracking: dict[str, asyncio.Task[Tracked]] = {}
        # Runs this server is launching: followed from their first line, every transition sent.
        self._launching: set[str] = set()
        self._polling = False  # out of inotify watches once: the runs directory is polled since

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Fold finished runs (the recent ones), re-attach to active runs, then watch for more."""
        from flowd.trace.log import is_active, list_runs

        self._loop = asyncio.get_running_loop()
        records = await asyncio.to_thread(list_runs, self.repo)
        finished = 0
        for record in records:
            if is_active(record):
                await self.track(record)
            elif finished < RECENT_FINISHED:
                finished += 1
                await self.track(record)

    async def watch(self) -> None:
        """Follow `.flow/runs` until stopped. Before it exists, watch its nearest ancestor."""
        while not self._stop.is_set():
            try:
                await self._watch()
                return
            except OSError as exc:
                from flowd.server.inotify import is_limit_error

                if self._polling or not is_limit_error(exc):
                    raise
                self._polling = True
                message = f"flowd: {exc}; the runs directory is polled every {POLL_MS} ms from now on"
                log.warning("%s", message)
                self.hooks.watch_polled(message)

    def _watch_options(self) -> dict[str, Any]:
        """How both watches of the runs directory (its parent until it exists, then itself) run."""
        return {
            "stop_event": self._stop, "debounce": WATCH_DEBOUNCE_MS, "step": WATCH_STEP_MS,
            "watch_filter": None, "force_polling": self._polling, "poll_delay_ms": POLL_MS,
        }  # fmt: skip

    async def _watch(self) -> None:
        from watchfiles import awatch

        from flowd.trace.log import runs_dir

        base = runs_dir(self.repo)
        while not self._stop.is_set():
            if not base.is_dir():
                anchor = base.parent if base.parent.is_dir() else self.repo
                async for _ in awatch(anchor, recursive=False, **self._watch_options()):
                    if base.is_dir() or (anchor != base.parent and base.parent.is_dir()):
                        break
                continue
            # The directory may have filled while we were not yet watching it.
            self._watching.set()
            await self._scan()
            async for changes in awatch(base, **self._watch_options()):
                await self._on_changes({Path(p) for _, p in changes}, base)
                if not base.is_dir():
                    break

    def stop(self) -> None:
        self._stop.set()
        for run in self.runs.values():
            self._close_pidfd(run)

    # -- launching -----------------------------------------------------------------------------
    async def launch(self, plan: Path, epic_id: str, options: runctl.LaunchOptions) -> Tracked:
        from flowd.engine import runctl

        run_id = runctl.new_run_id(epic_id)
        self._launching.add(run_id)
        try:
            process = await asyncio.to_thread(runctl.launch_detached, self.repo, plan, run_id, options)
            try:
                record = await asyncio.to_thread(runctl.wait_for_record, self.repo, run_id, process)
            except BaseException:
                if process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, 15)
                raise
            run = await self.track(record)
        finally:
            self._launching.discard(run_id)
        if run.process is None:
            run.process = process
        return run

    async def cancel(self, run_id: str) -> str:
        from flowd.engine import runctl

        outcome = await asyncio.to_thread(runctl.cancel_run, self.repo, run_id)
        run = self.runs.get(run_id)
        if run is not None:
            self.pump(run)
            self._refresh(run)
        return outcome

    # -- following -----------------------------------------------------------------------------
    async def track(self, record: RunRecord) -> Tracked:
        """Start following a run (idempotent); its past is folded off the loop, then announced."""
        if record.run_id in self.runs:
            return self.runs[record.run_id]
        pending = self._tracking.get(record.run_id)
        if pending is not None:
            return await pending
        task = asyncio.ensure_future(self._track(record))
        self._tracking[record.run_id] = task
        try:
            return await task
        finally:
            self._tracking.pop(record.run_id, None)

    async def _track(self, record: RunRecord) -> Tracked:
        from flowd.trace.log import TraceFollower, is_active, trace_path
        from flowd.trace.view import RunView

        view = RunView(run_id=record.run_id, pricer=self.pricer)
        run = Tracked(record, view, TraceFollower(trace_path(self.repo, record.run_id)))
        # The past: from the view checkpoint the runner keeps next to the trace, then the lines
        # after it, streaming and skipping what no view needs (flowd.trace.checkpoint, flowd.trace.fastfold).
        # A run launched here has a short past whose every transition the editor is owed (its
        # stories' `planned` among them, which a fast first story may already have left): it is
        # followed from its first line instead, by `pump` below.
        if record.run_id not in self._launching:
            await asyncio.to_thread(_fold_past, run.follower, view)
        view.epic_id = view.epic_id or record.epic_id
        view.plan = view.plan or record.plan
        view.epic_branch = view.epic_branch or layout.epic_branch(record.epic_id)
        view.started_at = record.started_at
        self.runs[record.run_id] = run
        run.ready = True
        if is_active(record):
            self._open_pidfd(run)
            self.hooks.attached(run)
            self.pump(run)  # lines written while we were folding
            self._refresh(run)
        else:
            self.pump(run)
            self._finish(run)
        return run

    def pump(self, run: Tracked) -> None:
        from flowd.events.model import RunEnded

        if not run.ready or self._stop.is_set():
            return
        for envelope in run.follower.events():
            run.view.apply(envelope)
            self.hooks.event(run, envelope)
            if isinstance(envelope.event, RunEnded):
                self._finish(run)

    async def _scan(self) -> None:
        from flowd.trace.log import runs_dir

        base = runs_dir(self.repo)
        with contextlib.suppress(OSError):
            for entry in sorted(base.iterdir()):
                if entry.is_dir():
                    await self._touch(entry.name)

    async def _on_changes(self, paths: set[Path], base: Path) -> None:
        if self._stop.is_set():
            return
        touched: dict[str, set[str]] = {}
        for path in paths:
            try:
                rel = path.relative_to(base)
            except ValueError:
                continue
            if rel.parts:
                touched.setdefault(rel.parts[0], set()).add(rel.parts[1] if len(rel.parts) > 1 else "")
        for run_id, names in touched.items():
            await self._touch(run_id, names)

    async def _touch(self, run_id: str, names: set[str] | None = None) -> None:
        from flowd.trace.log import load_run_record

        run = self.runs.get(run_id)
        if run is None:
            record = load_run_record(self.repo, run_id)
            if record is None:
                return  # run.json not written yet: its creation is another change
            await self.track(record)
            return
        if names is None or "trace.jsonl" in names:
            self.pump(run)
        if names is None or "run.json" in names:
            self._refresh(run)

    def _refresh(self, run: Tracked) -> None:
        """Re-read run.json: a closed record ends the run."""
        from flowd.trace.log import load_run_record

        record = load_run_record(self.repo, run.run_id)
        if record is not None:
            run.record = record
        if run.record.ended_at is not None:
            self.pump(run)
            self._finish(run)

    def _finish(self, run: Tracked) -> None:
        if run.ended:
            return
        run.ended = True
        self._close_pidfd(run)
        if run.view.status == "running":
            # No RunEnded in the trace: the record says how it ended, or the process died.
            run.view.status = run_status_of(run.record.outcome)
            run.view.ended_at = run.record.ended_at
        self.hooks.ended(run)

    # -- process exit --------------------------------------------------------------------------
    def _open_pidfd(self, run: Tracked) -> None:
        if self._loop is None or run.pidfd is not None:
            return
        try:
            fd = os.pidfd_open(run.record.pid)
        except (OSError, AttributeError):
            log.debug("no pidfd for run %s (pid %s)", run.run_id, run.record.pid)
            return
        run.pidfd = fd
        self._loop.add_reader(fd, self._process_exited, run)

    def _close_pidfd(self, run: Tracked) -> None:
        if run.pidfd is None:
            return
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(run.pidfd)
        with contextlib.suppress(OSError):
            os.close(run.pidfd)
        run.pidfd = None

    def _process_exited(self, run: Tracked) -> None:
        self._close_pidfd(run)
        if run.process is not None:
            run.process.poll()  # reap our own child
        self.pump(run)
        self._refresh(run)
        self._finish(run)

    # -- queries -------------------------------------------------------------------------------
    def ordered(self) -> list[Tracked]:
        """Active runs first, then by start, newest first."""
        runs = sorted(self.runs.values(), key=lambda r: r.record.started_at, reverse=True)
        return [r for r in runs if not r.ended] + [r for r in runs if r.ended]

    def find(self, run_id: str) -> Tracked | None:
        return self.runs.get(run_id)
