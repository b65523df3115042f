"""`flowd schema plan|roster|config|script|trace|protocol`: JSON Schema of each file, from its
model, and of the language server's custom protocol (`flowd.protocol`)."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from pydantic import BaseModel

_MODELS = {
    "plan": "flowd.plan.model:StoryPlan",
    "roster": "flowd.store.config:RosterFile",
    "config": "flowd.store.config:Settings",
    "script": "flowd.store.script_model:Script",
    "trace": "flowd.events.model:Envelope",
}
KINDS = (*_MODELS, "protocol")
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def schema_for(what: str) -> dict[str, Any]:
    if what == "protocol":
        return protocol_schema()
    module_name, _, attr = _MODELS[what].partition(":")
    model: type[BaseModel] = getattr(importlib.import_module(module_name), attr)
    schema = model.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = DRAFT
    schema.setdefault("title", f"flowd {what}")
    return schema


def protocol_schema() -> dict[str, Any]:
    """Every custom method with its params (and result) as `$ref`s into one `$defs`.

    `commands`, `requests` and `notifications` map each wire name to its shapes; `runOutcomes` the
    final run statuses; `enums` the words of the status and reason fields (docs/protocol.md)."""
    from pydantic.json_schema import models_json_schema

    from flowd import protocol

    models: list[type[BaseModel]] = []
    for method in protocol.METHODS:
        models += [m for m in (method.params(), method.result()) if m is not None and m not in models]
    refs, defs = models_json_schema(
        [(m, "validation") for m in models], by_alias=True, ref_template="#/$defs/{model}"
    )

    def shapes(method: protocol.Method) -> dict[str, Any]:
        out = {"params": refs[(method.params(), "validation")]}
        result = method.result()
        if result is not None:
            out["result"] = refs[(result, "validation")]
        return out

    return {
        "$schema": DRAFT,
        "title": "flowd protocol",
        "commands": {m.name: shapes(m) for m in protocol.COMMANDS},
        "requests": {m.name: shapes(m) for m in protocol.REQUESTS},
        "notifications": {m.name: shapes(m) for m in protocol.NOTIFICATIONS},
        "runOutcomes": list(protocol.RUN_OUTCOMES),
        "enums": {name: list(words) for name, words in protocol.ENUMS.items()},
        "$defs": defs.get("$defs", {}),
    }


def schema_command(args: argparse.Namespace) -> int:
    print(json.dumps(schema_for(args.what), indent=2))
    return 0
