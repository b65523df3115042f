"""The run commands (`workspace/executeCommand`): launch, cancel and resume a run, validate a
plan (docs/protocol.md). A run is a detached `flowd run`; `RunManager` starts and follows it."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams

from flowd import protocol
from flowd.base.errors import InputError
from flowd.server import diagnostics as diag
from flowd.server.app import request_failed
from flowd.server.features import Feature

if TYPE_CHECKING:
    from flowd.engine import runctl
    from flowd.protocol.models import CancelArgs, LaunchArgs, ResumeArgs, ValidateArgs
    from flowd.server.app import FlowServer
    from flowd.server.features.plans import PlanDiagnostics


def launch_options(p: LaunchArgs | None) -> runctl.LaunchOptions:
    from flowd.engine import runctl

    if p is None:
        return runctl.LaunchOptions()  # a resume keeps what the run was launched with
    pause_on = None if p.pause_on is None else [str(reason) for reason in p.pause_on]
    return runctl.LaunchOptions(
        concurrency=p.concurrency, fail_fast=p.fail_fast, budget_usd=p.budget_usd, pause_on=pause_on
    )


class RunCommands(Feature):
    def __init__(self, server: FlowServer, plans: PlanDiagnostics) -> None:
        super().__init__(server)
        self.plans = plans

    async def launch_epic(self, p: LaunchArgs) -> dict[str, Any]:
        return await self._launch(protocol.LAUNCH_EPIC.name, p.plan, launch_options(p))

    async def cancel_epic(self, p: CancelArgs) -> dict[str, Any]:
        return await self.cancel(p.run_id)

    async def resume_epic(self, p: ResumeArgs) -> dict[str, Any]:
        if p.run_id is not None:
            return await self._resume_run(p.run_id)
        assert p.plan is not None
        return await self._launch(protocol.RESUME_EPIC.name, p.plan, launch_options(None))

    async def validate_plan(self, p: ValidateArgs) -> dict[str, Any]:
        from flowd.protocol.models import ValidateResult

        path = self.plans.resolve(protocol.VALIDATE_PLAN.name, p.plan)
        violations = self.plans.check_path(path)
        return ValidateResult(violations=[v.located() for v in violations]).wire()

    async def cancel(self, run_id: str) -> dict[str, Any]:
        from flowd.protocol.models import CancelResult

        runs = self.server.need_runs()
        try:
            outcome = await runs.cancel(run_id)
        except InputError as exc:
            raise JsonRpcInvalidParams(f"{protocol.CANCEL_EPIC.name}: runId: {exc}")
        return CancelResult(run_id=run_id, outcome=outcome).wire()

    async def _launch(self, method: str, plan_arg: str, options: runctl.LaunchOptions) -> dict[str, Any]:
        from flowd.plan.parse import load_plan
        from flowd.protocol.models import LaunchResult
        from flowd.server.params import invalid

        runs = self.server.need_runs()
        path = self.plans.resolve(method, plan_arg)
        violations = await asyncio.to_thread(self.plans.violations, path)
        self.plans.publish(diag.file_uri(path), violations)
        if violations:
            shown = "; ".join(v.located() for v in violations[:5])
            more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
            raise invalid(method, f"plan {path} has {len(violations)} problem(s): {shown}{more}")
        plan = await asyncio.to_thread(load_plan, path)
        # A daemon's session: the run gets the session's own PATH and keys, not the daemon's.
        options = dataclasses.replace(options, env=self.server.env)
        try:
            run = await runs.launch(path, plan.epic_id, options)
        except InputError as exc:
            raise request_failed(f"{method}: {exc}")
        return LaunchResult(run_id=run.run_id, epic_id=plan.epic_id, epic_branch=plan.epic_branch).wire()

    async def _resume_run(self, run_id: str) -> dict[str, Any]:
        from flowd.trace.log import load_run_record

        name = protocol.RESUME_EPIC.name
        runs = self.server.need_runs()
        record = runs.find(run_id)
        plan = record.record.plan if record else None
        if plan is None:
            loaded = await asyncio.to_thread(load_run_record, runs.repo, run_id)
            if loaded is None:
                raise JsonRpcInvalidParams(f"{name}: runId: unknown run {run_id!r}")
            plan = loaded.plan
        if record is not None and not record.ended:
            raise request_failed(f"{name}: run {run_id} is still running")
        return await self._launch(name, plan, launch_options(None))
