"""Usage an ACP agent spends outside flowd's turns, brought into the trace (docs/roster.md "Side
requests", docs/cost.md).

claude-agent-acp asks its model for a session title on a new session's first prompt, beside the
turn. A title that finishes after the turn's answer is in no turn's `_meta.quota.model_usage`:
the adapter reports each result's increment of claude's running total, so the title waits for
the session's next result. When a session ends (another lane's session replaces it, or the
process is stopped), flowd settles it: it waits a bounded time for the title (the adapter tells
it with a `session_info_update` once the request is done), then sends the program's usage probe
(`/usage`, a local command that asks the model nothing), whose answer carries in
`_meta.quota.model_usage` whatever the running total grew by since the last turn. That usage is
billed to the turn that opened the session (its lane, role and clone) through the executor's
sink (`LateUsage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

import acp
from acp.schema import SessionInfoUpdate

from flowd.agents.base import LateUsage, TurnRequest
from flowd.agents.usage import model_usages

log = logging.getLogger("flowd.agents.acp")

SETTLE_WAIT_S = 15.0  # how long a session's end waits for its title request to finish
PROBE_TIMEOUT_S = 15.0  # the usage probe answers without a model request, in well under a second


@dataclass
class SessionBill:
    """What settling one session needs: the turn that opened it, whether any turn was answered,
    and whether its title request is done."""

    cause: TurnRequest
    answered: bool = False
    title: asyncio.Event = field(default_factory=asyncio.Event)


def note_update(bill: SessionBill | None, update: Any) -> None:
    """A session's update, in a turn or between turns: a title means the title request is done."""
    if bill is not None and isinstance(update, SessionInfoUpdate) and update.title:
        bill.title.set()


async def settle(
    conn: Any, session_id: str, bill: SessionBill, probe: str, wait_s: float
) -> LateUsage | None:
    """The usage `session_id` spent since its last answered turn, read with `probe` once its
    title request is done (or `wait_s` has passed); None when there is none or it cannot be read.
    A session none of whose turns was answered is not probed (its agent failed; nothing waits)."""
    if not bill.answered:
        return None
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(bill.title.wait(), wait_s)
    try:
        response = await asyncio.wait_for(
            conn.prompt(session_id=session_id, prompt=[acp.text_block(probe)]), PROBE_TIMEOUT_S
        )
    except Exception as exc:  # a probe that fails loses what it would have found, nothing more
        log.warning("reading the usage of session %s after its last turn failed: %s", session_id, exc)
        return None
    usage = model_usages(response.field_meta or {})
    return LateUsage(cause=bill.cause, usage=usage) if usage else None
