"""Validating a custom method's params against its declared model (`flowd.protocol.models`).

A bad parameter becomes a JSON-RPC `-32602` with one sentence naming the method, the field and
what is expected; handlers never see unvalidated input.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pygls.exceptions import JsonRpcInvalidParams

from flowd.base.wire import describe_validation_error

P = TypeVar("P", bound=BaseModel)


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
        known = ", ".join(sorted(f.alias or n for n, f in model.model_fields.items()))
        problems = describe_validation_error(exc, unknown=f"unknown field (known: {known})")
        raise invalid(method, "; ".join(problems))


def command_argument(method: str, args: tuple[Any, ...]) -> Any:
    """Commands take one object argument (docs/protocol.md); no argument at all is an empty one."""
    if len(args) > 1:
        raise invalid(method, f"takes exactly one object argument, got {len(args)}")
    return args[0] if args else None
