"""Lua of the protocol's names, rendered from its JSON Schema (`flowd schema protocol`).

`python -m flowd.schema.lua [--check] PATH` writes (or compares) the Neovim plugin's
`editors/nvim/lua/flowd/protocol.lua`, which `editors/nvim/lua/flowd/init.lua` takes every method
name from; `editors/vscode/scripts/protocol.mjs` regenerates it beside the extension's
`protocol.ts`, and `tests/server/test_protocol_lua.py` fails when the committed file drifts.

The module returns one table: `commands`, `requests` and `notifications` map each
method's short name (as in `protocol.ts`: `launchEpic`, `status`, `run`, `answer`) to its wire
name, `run_outcomes` lists the statuses a run ends with, and
`lane_statuses`, `attention_reasons`, ... the words of `flowd.protocol.ENUMS`. Lua needs no shapes: the plugin reads
params as plain tables.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

from flowd.protocol import key_of
from flowd.schema import codegen

HEADER = """\
-- GENERATED from `flowd schema protocol` by flowd/schema/lua.py: do not edit by hand.
-- Regenerate: `node editors/vscode/scripts/protocol.mjs` (it writes the extension's protocol.ts too).
-- flowd's custom LSP protocol (docs/protocol.md): every method's wire name by its short name.
"""


_LUA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LUA_KEYWORDS = frozenset({
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
})  # fmt: skip


def _field(key: str) -> str:
    plain = _LUA_NAME.match(key) and key not in _LUA_KEYWORDS
    return key if plain else f"[{json.dumps(key)}]"


def _names(table: str, names: Iterable[str]) -> list[str]:
    fields = [f"    {_field(key_of(name))} = {json.dumps(name)}," for name in names]
    return [f"  {table} = {{", *fields, "  },"]


def _snake(name: str) -> str:
    """`laneStatuses` → `lane_statuses`, as the plugin's other tables are named."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def render(schema: dict[str, Any]) -> str:
    """protocol.lua from the document `flowd schema protocol` prints."""
    outcomes = ", ".join(json.dumps(o) for o in schema["runOutcomes"])
    lines = [
        HEADER + "return {",
        *_names("commands", schema["commands"]),
        *_names("requests", schema["requests"]),
        *_names("notifications", schema["notifications"]),
        "  -- Outcomes a run ends with (RunEnded.outcome); any other status means it is still going.",
        f"  run_outcomes = {{ {outcomes} }},",
        "  -- The words of status and reason fields (flowd.protocol.ENUMS), by snake_case name.",
        *(
            f"  {_snake(name)} = {{ {', '.join(json.dumps(w) for w in words)} }},"
            for name, words in schema["enums"].items()
        ),
        "}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(codegen.main(render, "the Neovim plugin's protocol.lua"))
