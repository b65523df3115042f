"""The CLI's requests to the daemon (`rpc` connections, flowd/daemon/client.py): each answered with
what the command prints, from the daemon's folds where it has them (docs/editors.md, "The CLI
through the daemon"). A `FlowdError` goes back to the CLI, which says it as it would itself."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from flowd.base.errors import InputError
from flowd.server.hub import Hub


async def answer_rpc(hub: Hub, method: Any, params: dict[str, Any]) -> dict[str, Any]:
    await hub.ready.wait()
    if hub.repo is None or hub.runs is None:
        raise InputError(hub.repo_problem or f"{hub.root} is not a git repository")
    if method == "status":
        return {"text": _status(hub, params)}
    if method == "cost":
        return {"text": await asyncio.to_thread(_cost, hub, params)}
    if method == "post":
        return await _post(hub, params)
    if method == "cancel":
        return {"outcome": await hub.runs.cancel(str(params.get("runId")))}
    raise InputError(f"flowd daemon: unknown request {method!r}")


def _status(hub: Hub, params: dict[str, Any]) -> str:
    from flowd.control.status import RECENT, fold_view, render
    from flowd.trace.log import is_active, list_runs

    assert hub.repo is not None and hub.runs is not None
    views = []
    for record in list_runs(hub.repo.root)[:RECENT]:
        tracked = hub.runs.find(record.run_id)
        if tracked is None:
            views.append(fold_view(hub.repo.root, record, hub.runs.pricer))
            continue
        hub.runs.pump(tracked)  # what the trace says now, as a fold of the file would
        view = copy.copy(tracked.view)
        if view.status == "running" and not is_active(record):
            view.status = "interrupted"
        views.append(view)
    width = params.get("width")
    return render(
        views,
        json_out=bool(params.get("json")),
        tty=bool(params.get("tty")),
        width=width if isinstance(width, int) else None,
        color_system=params.get("colorSystem") if isinstance(params.get("colorSystem"), str) else None,
    )


def _cost(hub: Hub, params: dict[str, Any]) -> str:
    from flowd.cost.cli import report_text

    assert hub.repo is not None
    return report_text(hub.repo.root, params)


async def _post(hub: Hub, params: dict[str, Any]) -> dict[str, Any]:
    from pydantic import TypeAdapter

    from flowd.store.inbox import Request, post_async

    assert hub.repo is not None
    request = TypeAdapter(Request).validate_python(params.get("request"))
    reply = await post_async(hub.repo.root, str(params.get("runId")), request)
    return {"ok": reply.ok, "message": reply.message}
