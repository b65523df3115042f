"""The pool as the wire shows it: each executor's slots, the clones held and its exclusion."""

from __future__ import annotations

from collections.abc import Iterable

from flowd.base.timeutil import iso
from flowd.base.wire import WireModel
from flowd.roster.leasing import ExecutorState


class HeldClone(WireModel):
    clone: int
    role: str
    label: str | None = None


class ExclusionView(WireModel):
    kind: str
    reason: str
    until: str | None = None


class ExecutorView(WireModel):
    id: str
    kind: str
    model: str | None = None
    roles: list[str]
    slots: int
    coder_slots: int
    held: list[HeldClone]
    excluded: ExclusionView | None = None


class RosterView(WireModel):
    executors: list[ExecutorView]
    sources: list[str]


def roster_view(states: Iterable[ExecutorState], sources: Iterable[str]) -> RosterView:
    """Each executor's clones, who holds them and its exclusion, as the wire shows them."""
    views = []
    for s in states:
        x = s.exclusion
        views.append(
            ExecutorView(
                id=s.spec.id,
                kind=s.spec.kind,
                model=s.spec.model,
                roles=list(s.spec.roles),
                slots=s.spec.slots,
                coder_slots=s.spec.coder_capacity,
                held=[HeldClone(clone=n, role=h.role, label=h.label) for n, h in sorted(s.held.items())],
                excluded=None
                if x is None
                else ExclusionView(kind=x.kind, reason=x.reason, until=iso(x.until) if x.until else None),
            )
        )
    return RosterView(executors=views, sources=list(sources))
