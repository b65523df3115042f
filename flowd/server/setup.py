"""The only place LSP methods are bound: each handler validates its params, then calls `FlowServer`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcInvalidParams

from flowd.errors import InputError
from flowd.server.app import FlowServer

if TYPE_CHECKING:
    # The params models need pydantic, and runctl the trace and its events: each handler imports
    # them when first called, so `initialize` is answered without them (docs/performance.md).
    from flowd import runctl
    from flowd.server.params import LaunchParams, ResumeParams

COMMANDS = ("flow.launchEpic", "flow.cancelEpic", "flow.resumeEpic", "flow.validatePlan")


def _options(p: LaunchParams | ResumeParams) -> runctl.LaunchOptions:
    from flowd import runctl
    from flowd.server.params import LaunchParams

    if isinstance(p, LaunchParams):
        return runctl.LaunchOptions(concurrency=p.concurrency, fail_fast=p.fail_fast, budget_usd=p.budget_usd)
    return runctl.LaunchOptions()


def build_server() -> FlowServer:
    server = FlowServer()

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: FlowServer, params: lsp.InitializedParams) -> None:
        ls.spawn(ls.start())

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: FlowServer, params: Any) -> None:
        ls.stop()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: FlowServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.document_changed(params.text_document.uri, typed=False)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: FlowServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.document_changed(params.text_document.uri, typed=True)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: FlowServer, params: lsp.DidSaveTextDocumentParams) -> None:
        ls.document_saved(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: FlowServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.document_closed(params.text_document.uri)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(ls: FlowServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        ls.files_changed_on_disk([change.uri for change in params.changes])

    @server.feature(lsp.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def progress_cancel(ls: FlowServer, params: lsp.WorkDoneProgressCancelParams) -> None:
        ls.progress_cancelled(params.token)

    # -- commands (one object argument each) ---------------------------------------------------
    @server.command("flow.launchEpic")
    async def launch_epic(ls: FlowServer, *args: Any) -> dict[str, Any]:
        from flowd.server.params import LaunchParams, command_argument, parse

        p = parse(LaunchParams, command_argument("flow.launchEpic", args), "flow.launchEpic")
        await ls.ready.wait()
        return await ls.launch("flow.launchEpic", p.plan, _options(p))

    @server.command("flow.cancelEpic")
    async def cancel_epic(ls: FlowServer, *args: Any) -> dict[str, Any]:
        from flowd.server.params import CancelParams, command_argument, parse

        p = parse(CancelParams, command_argument("flow.cancelEpic", args), "flow.cancelEpic")
        await ls.ready.wait()
        return await ls.cancel(p.run_id)

    @server.command("flow.resumeEpic")
    async def resume_epic(ls: FlowServer, *args: Any) -> dict[str, Any]:
        from flowd.server.params import ResumeParams, command_argument, parse

        p = parse(ResumeParams, command_argument("flow.resumeEpic", args), "flow.resumeEpic")
        await ls.ready.wait()
        if p.run_id is not None:
            return await ls.resume_run(p.run_id, _options(p))
        assert p.plan is not None
        return await ls.launch("flow.resumeEpic", p.plan, _options(p))

    @server.command("flow.validatePlan")
    async def validate_plan(ls: FlowServer, *args: Any) -> dict[str, Any]:
        from flowd.server.params import ValidateParams, command_argument, parse

        p = parse(ValidateParams, command_argument("flow.validatePlan", args), "flow.validatePlan")
        await ls.ready.wait()
        return ls.validate("flow.validatePlan", p.plan)

    # -- requests ------------------------------------------------------------------------------
    @server.feature("flow/status")
    async def status(ls: FlowServer, params: Any) -> dict[str, Any]:
        from flowd.server.params import StatusParams, parse

        parse(StatusParams, params, "flow/status")
        await ls.ready.wait()
        return ls.status()

    @server.feature("flow/costReport")
    async def cost_report(ls: FlowServer, params: Any) -> dict[str, Any]:
        import asyncio

        from flowd.cost.cli import cost_report_for
        from flowd.server.params import CostReportParams, parse

        p = parse(CostReportParams, params, "flow/costReport")
        await ls.ready.wait()
        repo = ls.need_repo()
        try:
            report = await asyncio.to_thread(
                cost_report_for,
                repo.root,
                run_id=p.run_id,
                since=p.since,
                until=p.until,
                time_zone=p.time_zone,
                fmt=p.format,
            )
        except InputError as exc:
            raise JsonRpcInvalidParams(f"flow/costReport: {exc}")
        return {"text": report} if isinstance(report, str) else report

    @server.feature("flow/perimeter")
    async def perimeter(ls: FlowServer, params: Any) -> dict[str, Any]:
        from flowd.server.params import PerimeterParams, parse

        p = parse(PerimeterParams, params, "flow/perimeter")
        await ls.ready.wait()
        if p.uri is None:
            return {"violations": ls.perimeter_violations()}
        return await ls.perimeter_of(p.uri)

    return server
