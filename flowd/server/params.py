"""Parameter models of every custom request and command (contract §6), validated by pydantic.

A bad parameter becomes a JSON-RPC `-32602` with one sentence naming the method, the field and
what is expected; handlers never see unvalidated input.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pygls.exceptions import JsonRpcInvalidParams

from flowd.wire import WireModel


class Params(WireModel):
    """Strict on unknown keys (a typo should not silently widen a report), but LSP's generic
    progress tokens are accepted on every request."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    work_done_token: int | str | None = None
    partial_result_token: int | str | None = None


class LaunchParams(Params):
    plan: str = Field(min_length=1)
    concurrency: int | None = Field(default=None, ge=1)
    fail_fast: bool | None = None
    budget_usd: float | None = Field(default=None, gt=0)


class CancelParams(Params):
    run_id: str = Field(min_length=1)


class ResumeParams(Params):
    run_id: str | None = Field(default=None, min_length=1)
    plan: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> ResumeParams:
        if (self.run_id is None) == (self.plan is None):
            raise ValueError("give exactly one of runId or plan")
        return self


class ValidateParams(Params):
    plan: str = Field(min_length=1)


class StatusParams(Params):
    pass


class CostReportParams(Params):
    run_id: str | None = None
    since: str | None = None
    until: str | None = None
    time_zone: str | None = None
    format: Literal["json", "text", "markdown"] = "json"


class PerimeterParams(Params):
    uri: str | None = Field(default=None, min_length=1)


P = TypeVar("P", bound=Params)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) if loc else "params"


def invalid(method: str, message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(f"{method}: {message}")


def parse(model: type[P], raw: Any, method: str) -> P:
    """Validate raw JSON params against `model`, or raise -32602.

    Missing params, `null` and `[]` all mean "no fields" (docs/protocol.md): Neovim encodes an
    empty Lua table as `[]`, so `{}` and `[]` cannot be told apart by the client either.
    """
    if raw is None or (isinstance(raw, list | tuple) and len(raw) == 0):
        raw = {}
    if not isinstance(raw, dict):
        raise invalid(method, f"params must be one JSON object, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            field = _where(tuple(error["loc"]))
            text = str(error["msg"])
            if error["type"] == "extra_forbidden":
                known = ", ".join(sorted(f.alias or n for n, f in model.model_fields.items()))
                text = f"unknown field (known: {known})"
            elif text.startswith("Value error, "):
                text = text.removeprefix("Value error, ")
            problems.append(f"{field}: {text}" if error["loc"] else text)
        raise invalid(method, "; ".join(problems))


def command_argument(method: str, args: tuple[Any, ...]) -> Any:
    """Commands take one object argument (docs/protocol.md); no argument at all is an empty one."""
    if len(args) > 1:
        raise invalid(method, f"takes exactly one object argument, got {len(args)}")
    return args[0] if args else None
