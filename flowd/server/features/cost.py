"""`flow/costReport`: the cost report of `flowd cost` (docs/cost.md), as JSON or `{text}`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams

from flowd import protocol
from flowd.base.errors import InputError
from flowd.server.features import Feature

if TYPE_CHECKING:
    from flowd.protocol.models import CostReportParams


class CostReports(Feature):
    async def report(self, p: CostReportParams) -> dict[str, Any]:
        from flowd.cost.cli import cost_report_for

        repo = self.server.need_repo()
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
            raise JsonRpcInvalidParams(f"{protocol.COST_REPORT.name}: {exc}")
        from flowd.protocol.models import CostReportResult

        result = CostReportResult(text=report) if isinstance(report, str) else CostReportResult(**report)
        # Unset, not None: the JSON report is sent exactly as `flowd cost --json` prints it.
        return result.model_dump(mode="json", by_alias=True, exclude_unset=True)
