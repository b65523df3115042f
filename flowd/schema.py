"""`flowd schema plan|roster|config|script|trace`: JSON Schema of each file, from its model."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from pydantic import BaseModel

_MODELS = {
    "plan": "flowd.plan.model:StoryPlan",
    "roster": "flowd.config:RosterFile",
    "config": "flowd.config:Settings",
    "script": "flowd.agents.script_model:Script",
    "trace": "flowd.events:Envelope",
}


def schema_for(what: str) -> dict[str, Any]:
    module_name, _, attr = _MODELS[what].partition(":")
    model: type[BaseModel] = getattr(importlib.import_module(module_name), attr)
    schema = model.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema.setdefault("title", f"flowd {what}")
    return schema


def schema_command(args: argparse.Namespace) -> int:
    print(json.dumps(schema_for(args.what), indent=2))
    return 0
