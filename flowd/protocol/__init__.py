"""flowd's custom LSP protocol, declared once (docs/protocol.md).

One `Method` per custom request, `workspace/executeCommand` command and server notification: its
wire name and the names of its params and result models in `flowd.protocol.models`. This module
imports no pydantic, so the server can bind its handlers (and answer `initialize`) before any
model is loaded (docs/performance.md); `Method.params()` / `Method.result()` load them on use.

Everything that names a custom method takes the name from here: the server's bindings
(`flowd/server/setup.py`), the notifications it sends (`flowd/server/notify.py`), the JSON
Schema `flowd schema protocol` prints, and through it the extension's generated
`editors/vscode/src/protocol.ts` and the Neovim plugin's generated `lua/flowd/protocol.lua`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from flowd.events import statuses

if TYPE_CHECKING:
    from pydantic import BaseModel

Kind = Literal["command", "request", "notification"]


@dataclass(frozen=True)
class Method:
    """One custom method: `name` on the wire, its params model, and its result model (requests
    and commands; `None` for notifications). Models are named, not imported (see above)."""

    name: str
    kind: Kind
    params_model: str
    result_model: str | None = None

    @property
    def key(self) -> str:
        return key_of(self.name)

    def params(self) -> type[BaseModel]:
        return _model(self.params_model)

    def result(self) -> type[BaseModel] | None:
        return _model(self.result_model) if self.result_model else None


def key_of(name: str) -> str:
    """The short name clients index a method by: `flow.launchEpic` → `launchEpic`."""
    return name.split("/", 1)[-1].split(".", 1)[-1]


def _model(name: str) -> type[BaseModel]:
    from pydantic import BaseModel

    model = getattr(importlib.import_module("flowd.protocol.models"), name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"flowd.protocol.models.{name} is not a model")
    return model


# -- commands (`workspace/executeCommand`, one object argument) --------------------------------
LAUNCH_EPIC = Method("flow.launchEpic", "command", "LaunchArgs", "LaunchResult")
CANCEL_EPIC = Method("flow.cancelEpic", "command", "CancelArgs", "CancelResult")
RESUME_EPIC = Method("flow.resumeEpic", "command", "ResumeArgs", "LaunchResult")
VALIDATE_PLAN = Method("flow.validatePlan", "command", "ValidateArgs", "ValidateResult")
ANSWER = Method("flow.answer", "command", "AnswerArgs", "AnswerResult")
ADD_REVISION = Method("flow.addRevision", "command", "AddRevisionArgs", "AddRevisionResult")

# -- requests (client → server) ----------------------------------------------------------------
STATUS = Method("flow/status", "request", "StatusParams", "StatusResult")
COST_REPORT = Method("flow/costReport", "request", "CostReportParams", "CostReportResult")
PERIMETER = Method("flow/perimeter", "request", "PerimeterParams", "PerimeterResult")
GRAPH = Method("flow/graph", "request", "GraphParams", "GraphResult")
TIMELINE = Method("flow/timeline", "request", "TimelineParams", "TimelineResult")

# -- notifications (server → client) -----------------------------------------------------------
RUN = Method("flow/run", "notification", "RunParams")
LANE = Method("flow/lane", "notification", "LaneParams")
TASK = Method("flow/task", "notification", "TaskParams")
CLONE = Method("flow/clone", "notification", "CloneParams")
COST = Method("flow/cost", "notification", "CostParams")
ATTENTION = Method("flow/attention", "notification", "AttentionParams")

COMMANDS = (LAUNCH_EPIC, CANCEL_EPIC, RESUME_EPIC, VALIDATE_PLAN, ANSWER, ADD_REVISION)
REQUESTS = (STATUS, COST_REPORT, PERIMETER, GRAPH, TIMELINE)
NOTIFICATIONS = (RUN, LANE, TASK, CLONE, COST, ATTENTION)
METHODS = (*COMMANDS, *REQUESTS, *NOTIFICATIONS)
BY_NAME = {m.name: m for m in METHODS}

# The statuses a run ends with (`RunEnded.outcome`); any other run status means it is going on.
RUN_OUTCOMES = statuses.RUN_OUTCOMES

# The words some string fields take, generated into the clients (`protocol.ts`, `protocol.lua`)
# so the editors compare against these names instead of copies; tests/server/test_protocol_decl.py
# ties each to what the server sends. Wire name (the schema's `enums` key) → words.
ENUMS: dict[str, tuple[str, ...]] = {
    # `flow/lane.status` (and a `flow/graph` story's): a story's status, and the merge train's.
    "laneStatuses": get_args(statuses.LaneStatus),
    # `flow/run.status` and a `flow/status` run's.
    "runStatuses": get_args(statuses.RunStatus),
    # `flow/attention.reason`; `repaired`, `escaped` and `unconfined` only inform, `cleared` ends
    # a wait.
    "attentionReasons": (
        "paused",
        "blocked",
        "failed",
        "budget",
        "repaired",
        "escaped",
        "unconfined",
        "cleared",
    ),
    # The attention reasons a story waits on a person with.
    "waitingReasons": ("paused", "blocked", "budget", "failed"),
    # What `flow.launchEpic`'s `pauseOn` may name (docs/answers.md).
    "pauseReasons": ("budget", "blocked", "noExecutor", "merge"),
    # A `flow/timeline` phase, in the order a lane passes through them (docs/graph.md).
    "timelinePhases": ("planned", "coding", "gated", "queued", "merging", "merged", "paused", "failed"),
}
