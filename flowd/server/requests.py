"""The CLI's requests to the daemon (`rpc` connections): each answered as the command would print
it, from the daemon's folds where it has them (docs/editors.md, "The CLI through the daemon")."""

from __future__ import annotations

from typing import Any

from flowd.base.errors import InputError
from flowd.server.hub import Hub


async def answer_rpc(hub: Hub, method: Any, params: dict[str, Any]) -> dict[str, Any]:
    raise InputError(f"flowd daemon: unknown request {method!r}")
