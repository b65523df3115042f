"""The language server's shared state; the behaviour lives in `features/`, bound by `setup.py`.

`FlowServer` holds what every feature reads: the workspace root and repository, the runs followed
through their traces (`RunManager`), notification pacing (`Pacer`), diagnostics merged per file
(`DiagnosticStore`), watches of active story worktrees, and the features themselves, to which it
fans out the server's lifecycle and each run's life (`RunHooks`). Every method here runs on the
server's event loop; blocking work (git, reading traces, cancelling) goes to threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from flowd import __version__
from flowd.base.errors import FlowdError
from flowd.server import diagnostics as diag
from flowd.server.hub import Hub, SharedWatches, open_runs
from flowd.server.jsonrpc import FlowProtocol
from flowd.server.notify import Pacer
from flowd.server.runs import RunHooks, RunManager, Tracked
from flowd.server.watch import WorktreeWatches
from flowd.vcs.gitops import Repo

if TYPE_CHECKING:
    # Modules built on pydantic (plans, events, views, params) load on first use, after
    # `initialize` has been answered (docs/performance.md).
    from flowd.control.shapes import Places
    from flowd.events.model import Envelope
    from flowd.plan.model import StoryPlan

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803  # LSP: the request was valid but could not be carried out


def request_failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=REQUEST_FAILED)


class FeatureHooks(Protocol):
    """What the server calls on each feature (`flowd/server/features/`'s `Feature`): the server's
    lifecycle and each run's life. Declared here so the server stands below its features."""

    async def started(self) -> None: ...
    def run_attached(self, run: Tracked) -> None: ...
    def run_event(self, run: Tracked, envelope: Envelope) -> None: ...
    def run_ended(self, run: Tracked) -> None: ...


class FlowServer(LanguageServer, RunHooks):
    """One editor's session. In-process (`flowd serve --no-daemon`) it follows the runs itself; in
    the daemon (`hub` given) it shares the daemon's `Hub`: the runs folded once, their hooks fanned
    out to every session, and its own initialize, documents, diagnostics and notifications."""

    def __init__(self, hub: Hub | None = None, env: dict[str, str] | None = None) -> None:
        from flowd.server.jsonrpc import SessionProtocol

        protocol_cls = FlowProtocol if hub is None else SessionProtocol
        # The daemon's sessions share one converter: a fresh one costs each session its start
        # (~5 ms) and generates again the code that turns each message type into its object and
        # back (~20-40 ms for `initialize` alone), on every editor reload.
        from pygls.protocol import default_converter

        converters = default_converter if hub is None else hub.converter
        super().__init__(
            "flowd", __version__, protocol_cls=protocol_cls, converter_factory=converters, max_workers=8
        )
        self.hub = hub
        self.env = env  # the session's environment (its forwarder's): runs launched here get it
        self.root: Path = Path.cwd()
        self.repo: Repo | None = None
        self.repo_problem: str | None = None
        self.runs: RunManager | None = None
        self.places: Places | None = None  # where the repository's runs keep things, sent to editors
        self.diags = diag.DiagnosticStore(self._publish)
        self.pacer = Pacer(self._send, self._call_later)
        # In the daemon, a view of the hub's watches: each worktree is watched once for all sessions.
        self.worktrees: WorktreeWatches | SharedWatches = (
            WorktreeWatches(lambda _key, message: self.watch_polled(message))
            if hub is None
            else SharedWatches(hub)
        )
        self.ready = asyncio.Event()
        self.features: list[FeatureHooks] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- plumbing ------------------------------------------------------------------------------
    def report_server_error(self, error: Exception, source: Any) -> None:
        # Errors belong in the log, not in pop-ups; request errors already reach the client.
        log.error("%s", error)
        if isinstance(error, ValueError) and not isinstance(error, JsonRpcException):
            # The reader loop could not decode a body: JSON-RPC answers that with -32700.
            protocol = self.protocol
            if isinstance(protocol, FlowProtocol):
                protocol.parse_error(error)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("background task failed: %s", exc, exc_info=exc)

    def _call_later(self, delay: float, callback: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback)

    def _send(self, method: str, params: dict[str, Any]) -> None:
        self.protocol.notify(method, params)

    def _publish(self, uri: str, diagnostics: list[lsp.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """After `initialized`: find the repository, re-attach to its runs, watch for more."""
        self.root = self._workspace_root()
        if self.hub is not None:
            await self._join(self.hub)
            return
        self.repo, self.repo_problem, self.places, self.runs = await open_runs(self.root, self, self.spawn)
        await self._features_started()

    async def _features_started(self) -> None:
        for feature in self.features:
            try:
                await feature.started()
            except Exception:
                _feature_failed(feature, "started")
        self.ready.set()

    async def _join(self, hub: Hub) -> None:
        """A daemon's session: the hub's repository and runs; the live ones' snapshots are sent
        and the session joins the fan-out in one step, so no event falls between."""
        await hub.ready.wait()
        self.repo, self.repo_problem, self.places, self.runs = (
            hub.repo,
            hub.repo_problem,
            hub.places,
            hub.runs,
        )
        for run in hub.join(self):
            self.attached(run)
        await self._features_started()

    def resync(self) -> None:
        """A fresh snapshot (the session fell behind and notifications were dropped)."""
        if self.hub is not None:
            for run in self.hub.live():
                self.attached(run)
        self.diags.republish()

    def stop(self) -> None:
        """Stop following (runs themselves keep going: they are detached processes)."""
        with contextlib.suppress(Exception):
            self.pacer.flush()
        if self.hub is not None:
            self.hub.leave(self)
        elif self.runs is not None:
            self.runs.stop()
        self.worktrees.stop_all()
        for task in list(self._tasks):
            task.cancel()

    def _workspace_root(self) -> Path:
        try:
            workspace = self.workspace
        except RuntimeError:
            return Path.cwd()
        if workspace.root_path:
            return Path(workspace.root_path).resolve()
        for folder in workspace.folders.values():
            path = to_fs_path(folder.uri)
            if path:
                return Path(path).resolve()
        return Path.cwd()

    def need_repo(self) -> Repo:
        if self.repo is None:
            raise request_failed(self.repo_problem or f"{self.root} is not a git repository")
        return self.repo

    def need_runs(self) -> RunManager:
        self.need_repo()
        assert self.runs is not None
        return self.runs

    def plan_of(self, run: Tracked) -> StoryPlan | None:
        """The plan a run follows, loaded once (a plan that fails to load is not retried)."""
        from flowd.plan.parse import load_plan

        if run.plan is None and run.plan_error is None:
            try:
                run.plan = load_plan(Path(run.view.plan or run.record.plan))
            except (FlowdError, OSError) as exc:
                run.plan_error = str(exc)
        return run.plan

    # -- run hooks (RunManager), fanned out to the features ------------------------------------
    # One feature's error is logged and never keeps the others from hearing it (as esbonio does).
    def attached(self, run: Tracked) -> None:
        run.live = True
        self._fan_out("run_attached", lambda feature: feature.run_attached(run))

    def event(self, run: Tracked, envelope: Envelope) -> None:
        self._fan_out("run_event", lambda feature: feature.run_event(run, envelope))

    def ended(self, run: Tracked) -> None:
        if not run.live:
            return
        self.pacer.flush()
        self._fan_out("run_ended", lambda feature: feature.run_ended(run))

    def watch_polled(self, message: str) -> None:
        """A watch is polled, not watched (out of inotify watches): the editor hears it once, as a
        warning it shows; the log has it too (docs/performance.md)."""
        self.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Warning, message=message))

    def _fan_out(self, hook: str, call: Callable[[FeatureHooks], None]) -> None:
        for feature in self.features:
            try:
                call(feature)
            except Exception:
                _feature_failed(feature, hook)


def _feature_failed(feature: FeatureHooks, hook: str) -> None:
    log.exception("feature %s failed in %s; the other features go on", type(feature).__name__, hook)
