"""The Neovim plugin takes every method name from `editors/nvim/lua/flowd/protocol.lua`, generated
from the declaration (`flowd.protocol`, docs/protocol.md); these fail when it drifts or when the
plugin spells a name itself (the generator's `--check`: tests/server/test_protocol_decl.py)."""

from __future__ import annotations

import re
from pathlib import Path

from flowd import protocol
from flowd.schema.json_schema import protocol_schema
from flowd.schema.lua import render

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "nvim" / "lua" / "flowd"
PROTOCOL_LUA = PLUGIN / "protocol.lua"
METHOD_NAME = re.compile(r"""["'](flow[/.][A-Za-z]+)["']""")


def test_the_committed_protocol_lua_is_what_the_declaration_renders() -> None:
    assert PROTOCOL_LUA.read_text(encoding="utf-8") == render(protocol_schema()), (
        "editors/nvim/lua/flowd/protocol.lua has drifted from flowd.protocol: "
        "run `node editors/vscode/scripts/protocol.mjs` and commit the result"
    )


def test_protocol_lua_names_every_declared_method_by_its_short_name() -> None:
    text = PROTOCOL_LUA.read_text(encoding="utf-8")
    sections = {"command": "commands", "request": "requests", "notification": "notifications"}
    for method in protocol.METHODS:
        table = text.split(f"  {sections[method.kind]} = {{\n", 1)[1].split("  },", 1)[0]
        assert f'    {method.key} = "{method.name}",' in table, method.name


def test_the_plugin_spells_no_method_name_outside_the_generated_module() -> None:
    found = []
    for path in sorted((ROOT / "editors" / "nvim").rglob("*.lua")):
        if path == PROTOCOL_LUA:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.lstrip().startswith("--"):
                continue  # a comment may name a method; code takes the names from the module
            found += [f"{path.relative_to(ROOT)}:{number}: {m}" for m in METHOD_NAME.findall(line)]
    assert found == []
    # The notification handlers and the commands take their names from the generated module.
    for module in ("handlers.lua", "commands.lua", "client.lua"):
        assert 'require("flowd.protocol")' in (PLUGIN / module).read_text(encoding="utf-8"), module
