"""The only place LSP methods are bound: each handler is glue (params → a feature → the answer).

Standard LSP notifications fan out to the features that care; each custom method (named in
`flowd.protocol`) has one handler that validates its params against the declared model, waits
until the server has found its repository, and calls one feature. The features are listed in
`flowd/server/features/__init__.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp

from flowd import protocol
from flowd.server.app import FlowServer
from flowd.server.features import Feature
from flowd.server.features.answers import Answers
from flowd.server.features.attention import Attention
from flowd.server.features.commands import RunCommands
from flowd.server.features.cost import CostReports
from flowd.server.features.notifications import RunNotifications
from flowd.server.features.owned import OwnershipWarnings
from flowd.server.features.perimeter import PerimeterDiagnostics
from flowd.server.features.plans import PlanDiagnostics
from flowd.server.features.progress import WorkDoneProgress
from flowd.server.features.review import Revisions

if TYPE_CHECKING:
    from flowd.server.hub import Hub

Handler = Callable[[Any], Awaitable[dict[str, Any]]]


def build_server(hub: Hub | None = None, env: dict[str, str] | None = None) -> FlowServer:
    """One session's server; with `hub`, a session of the daemon (flowd/server/daemon.py)."""
    server = FlowServer(hub, env)
    plans = PlanDiagnostics(server)
    owned = OwnershipWarnings(server)
    perimeter = PerimeterDiagnostics(server)
    notes = RunNotifications(server)
    commands = RunCommands(server, plans)
    progress = WorkDoneProgress(server, commands.cancel)
    cost = CostReports(server)
    attention = Attention(server)
    answers = Answers(server)
    # Run hooks go in this order: a run's notifications before its progress, diagnostics after.
    revisions = Revisions(server)
    features: list[Feature] = [
        notes,
        attention,
        progress,
        perimeter,
        owned,
        plans,
        commands,
        cost,
        answers,
        revisions,
    ]
    server.features.extend(features)
    _bind_lifecycle(server)
    _bind_documents(server, plans, owned)

    @server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def progress_cancel(ls: FlowServer, params: lsp.WorkDoneProgressCancelParams) -> None:
        progress.cancelled(params.token)

    _bind_command(server, protocol.LAUNCH_EPIC, commands.launch_epic)
    _bind_command(server, protocol.CANCEL_EPIC, commands.cancel_epic)
    _bind_command(server, protocol.RESUME_EPIC, commands.resume_epic)
    _bind_command(server, protocol.VALIDATE_PLAN, commands.validate_plan)
    _bind_command(server, protocol.ANSWER, answers.answer)
    _bind_command(server, protocol.ADD_REVISION, revisions.add_revision)
    _bind_request(server, protocol.STATUS, lambda p: _now(notes.status()))
    _bind_request(server, protocol.COST_REPORT, cost.report)
    _bind_request(server, protocol.GRAPH, lambda p: _now(notes.graph(p.run_id)))
    _bind_request(server, protocol.TIMELINE, lambda p: _now(notes.timeline(p.run_id)))
    _bind_request(
        server,
        protocol.PERIMETER,
        lambda p: perimeter.owner_of(p.uri) if p.uri else _now(perimeter.violations()),
    )
    return server


async def _now(value: dict[str, Any]) -> dict[str, Any]:
    return value


def _bind_lifecycle(server: FlowServer) -> None:
    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: FlowServer, params: lsp.InitializedParams) -> None:
        ls.spawn(ls.start())

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: FlowServer, params: Any) -> None:
        ls.stop()


def _bind_documents(server: FlowServer, plans: PlanDiagnostics, owned: OwnershipWarnings) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: FlowServer, params: lsp.DidOpenTextDocumentParams) -> None:
        plans.changed(params.text_document.uri)
        owned.opened(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: FlowServer, params: lsp.DidChangeTextDocumentParams) -> None:
        plans.changed(params.text_document.uri)
        owned.typed(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: FlowServer, params: lsp.DidSaveTextDocumentParams) -> None:
        owned.saved(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FlowServer, params: lsp.DidCloseTextDocumentParams) -> None:
        plans.closed(params.text_document.uri)
        owned.closed(params.text_document.uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(ls: FlowServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        owned.changed_on_disk([change.uri for change in params.changes])


def _bind_command(server: FlowServer, method: protocol.Method, run: Handler) -> None:
    """`workspace/executeCommand` `method.name`, with one object argument (docs/protocol.md)."""

    @server.command(method.name)
    async def command(ls: FlowServer, *args: Any) -> dict[str, Any]:
        from flowd.server.params import command_argument, parse

        p = parse(method.params(), command_argument(method.name, args), method.name)
        await ls.ready.wait()
        return await run(p)


def _bind_request(server: FlowServer, method: protocol.Method, run: Handler) -> None:
    @server.feature(method.name)
    async def request(ls: FlowServer, params: Any) -> dict[str, Any]:
        from flowd.server.params import parse

        p = parse(method.params(), params, method.name)
        await ls.ready.wait()
        return await run(p)
