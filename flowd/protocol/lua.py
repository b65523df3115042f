"""Lua of the protocol's names, rendered from its JSON Schema (`flowd schema protocol`).

`python -m flowd.protocol.lua [--check] PATH` writes (or compares) the Neovim plugin's
`editors/nvim/lua/flowd/protocol.lua`, which `editors/nvim/lua/flowd/init.lua` takes every method
name from; `editors/vscode/scripts/protocol.mjs` regenerates it beside the extension's
`protocol.ts`, and `tests/server/test_protocol_lua.py` fails when the committed file drifts.

The module returns one table: `commands`, `requests`, `notifications` and `reserved` map each
method's short name (as in `protocol.ts`: `launchEpic`, `status`, `run`, `answer`) to its wire
name, and `run_outcomes` lists the statuses a run ends with. Lua needs no shapes: the plugin reads
params as plain tables.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

from flowd.protocol import codegen, key_of

HEADER = """\
-- GENERATED from `flowd schema protocol` by flowd/protocol/lua.py: do not edit by hand.
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


def render(schema: dict[str, Any]) -> str:
    """protocol.lua from the document `flowd schema protocol` prints."""
    outcomes = ", ".join(json.dumps(o) for o in schema["runOutcomes"])
    lines = [
        HEADER + "return {",
        *_names("commands", schema["commands"]),
        *_names("requests", schema["requests"]),
        *_names("notifications", schema["notifications"]),
        "  -- Reserved for pausing and answering, not served yet: the plugin probes for them.",
        *_names("reserved", schema["reserved"]),
        "  -- Outcomes a run ends with (RunEnded.outcome); any other status means it is still going.",
        f"  run_outcomes = {{ {outcomes} }},",
        "}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(codegen.main(render, "the Neovim plugin's protocol.lua"))
