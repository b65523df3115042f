"""Hand-built traces with known times, written as the trace writer would write them."""

from __future__ import annotations

from pathlib import Path

from flowd.events.model import Envelope, Event, RunStarted, TokensUsed, Usage, dump_envelope
from flowd.trace.log import trace_path


def used(
    agent: str = "coder",
    *,
    model: str | None = "m",
    input: int = 0,
    output: int = 0,
    cached_read: int | None = None,
    cache_write: int | None = None,
    cost: float | None = None,
    lane: str | None = None,
    executor: str | None = None,
    clone: int | None = None,
    estimated: bool = False,
) -> TokensUsed:
    return TokensUsed(
        agent=agent,
        model=model,
        lane=lane,
        executor=executor,
        clone=clone,
        estimated=estimated,
        usage=Usage(
            input=input,
            output=output,
            total=input + output,
            cached_read=cached_read,
            cache_write=cache_write,
            cost_usd=cost,
        ),
    )


def started(budget: float | None = None, epic: str = "auth") -> RunStarted:
    return RunStarted(
        epic_id=epic,
        epic_branch=f"epic/{epic}",
        plan="plan.json",
        stories=["a"],
        concurrency=1,
        budget_usd=budget,
    )


def write_trace(
    repo: Path, run_id: str, events: list[tuple[str, Event]], *, extra: tuple[bytes, ...] = ()
) -> Path:
    """Events at the given UTC times (`2026-10-25T01:30:00.000Z`), then any raw extra lines."""
    path = trace_path(repo, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        for seq, (at, event) in enumerate(events, 1):
            handle.write(dump_envelope(Envelope(seq=seq, at=at, run_id=run_id, event=event)) + b"\n")
        for line in extra:
            handle.write(line + b"\n")
    return path
