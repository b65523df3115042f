"""The SDK's quick import (flowd/agents/acp_import.py): the same models, without the docstrings.

Each import runs in a fresh interpreter, since a module is imported once per process."""

from __future__ import annotations

import json
import subprocess
import sys

_SHAPES = """
import hashlib, inspect, json, sys
if sys.argv[1] == "quick":
    from flowd.agents import acp_import
    acp_import.sdk()
    from pydantic._internal import _fields
    assert _fields.extract_docstrings_from_cls.__module__.startswith("pydantic"), "not put back"
import acp.schema as schema
from pydantic import BaseModel

def shape(value):
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k != "description"}
    return [shape(v) for v in value] if isinstance(value, list) else value

models = [c for _, c in sorted(vars(schema).items())
          if inspect.isclass(c) and issubclass(c, BaseModel) and c.__module__ == "acp.schema"]
shapes = json.dumps({c.__name__: shape(c.model_json_schema()) for c in models}, sort_keys=True)
print(json.dumps({
    "models": len(models),
    "described": sum(1 for c in models for f in c.model_fields.values() if f.description),
    "shapes": hashlib.sha256(shapes.encode()).hexdigest(),
    "update": schema.SessionNotification.model_validate({
        "sessionId": "s1",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
    }).model_dump(by_alias=True, exclude_none=True),
}))
"""


def _import(how: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _SHAPES, how], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_quick_import_builds_every_model_alike_without_the_attribute_docstrings() -> None:
    plain, quick = _import("plain"), _import("quick")
    assert isinstance(plain["models"], int) and plain["models"] > 200
    assert isinstance(plain["described"], int) and plain["described"] > 100
    # Every model validates and dumps as before: its JSON Schema, descriptions aside, is the same.
    assert (quick["models"], quick["shapes"], quick["update"]) == (
        plain["models"],
        plain["shapes"],
        plain["update"],
    )
    # 0, or pydantic no longer has the function flowd turns off: the import is slow again.
    assert quick["described"] == 0, (
        "pydantic's extract_docstrings_from_cls moved: see flowd/agents/acp_import.py"
    )
