"""TypeScript of the protocol, rendered from its JSON Schema (`flowd schema protocol`).

`python -m flowd.schema.typescript [--check] PATH` writes (or, with `--check`, compares) the
extension's `editors/vscode/src/protocol.ts`; `editors/vscode/scripts/protocol.mjs` runs it in the
extension's build and test, and `tests/server/test_protocol_decl.py` fails when the committed file
differs from what the declaration renders.

Names: `Commands`, `Requests` and `Notifications` map short names to wire names, and each method
is also a constant named as in `flowd.protocol` (`LAUNCH_EPIC`, `ATTENTION`); Types: a model becomes an interface of the same name, a string enum a union of literals, a root
union a type alias. A field that may be left out is optional (`?`); `null` is kept only where the
schema says the server sends it (`nullable`, see `flowd.protocol.models`).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from flowd.protocol import key_of
from flowd.schema import codegen

HEADER = """\
// GENERATED from `flowd schema protocol` by flowd/schema/typescript.py: do not edit by hand.
// Regenerate: `node scripts/protocol.mjs` (run by the extension's build and test scripts).
// flowd's custom LSP protocol (docs/protocol.md), as the extension sees it. Every optional
// field may be absent on the wire: the server omits defaults and unknowns.
"""

TRAILER = """\
export function isRunActive(status: string): boolean {
  return !(RUN_OUTCOMES as readonly string[]).includes(status);
}

/**
 * What the extension needs of the server. Implemented over the language client in the editor
 * and over a bare JSON-RPC connection in the wire tests, so command flows are one code path.
 */
export interface FlowServer {
  executeCommand<T>(command: string, arg: object): Promise<T>;
  request<T>(method: string, params: object): Promise<T>;
}
"""


def _screaming(name: str) -> str:
    """`flow.launchEpic` → `LAUNCH_EPIC`, the name `flowd.protocol` gives it in Python."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key_of(name)).upper()


def _names(const: str, methods: dict[str, Any]) -> str:
    lines = [f'  {key_of(name)}: "{name}",' for name in methods]
    singles = [f'export const {_screaming(name)} = "{name}";' for name in methods]
    return "\n".join([f"export const {const} = {{", *lines, "} as const;", *singles, ""])


def _type(schema: dict[str, Any], *, keep_null: bool = True) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "anyOf" in schema:
        parts = [s for s in schema["anyOf"] if keep_null or s.get("type") != "null"]
        return " | ".join(dict.fromkeys(_type(s) for s in parts))
    kind = schema.get("type")
    if kind == "array":
        item = _type(schema.get("items", {}))
        return f"({item})[]" if " | " in item else f"{item}[]"
    simple = {
        "string": "string",
        "integer": "number",
        "number": "number",
        "boolean": "boolean",
        "null": "null",
    }
    if isinstance(kind, str) and kind in simple:
        return simple[kind]
    return "Record<string, unknown>" if kind == "object" else "unknown"


def _doc(text: str | None, indent: str = "") -> list[str]:
    if not text:
        return []
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}".rstrip() for line in lines), f"{indent} */"]


def _declaration(name: str, schema: dict[str, Any]) -> list[str]:
    doc = _doc(schema.get("description"))
    if "enum" in schema or "anyOf" in schema:
        return [*doc, f"export type {name} = {_type(schema)};", ""]
    required = set(schema.get("required", []))
    lines = [*doc, f"export interface {name} {{"]
    for field, prop in schema.get("properties", {}).items():
        optional = field not in required
        text = _type(prop, keep_null=not optional or bool(prop.get("nullable")))
        lines.append(f"  {field}{'?' if optional else ''}: {text};")
    if schema.get("additionalProperties") is True:
        lines.append("  [key: string]: unknown;")
    return [*lines, "}", ""]


def render(schema: dict[str, Any]) -> str:
    """protocol.ts from the document `flowd schema protocol` prints."""
    out = [HEADER]
    out.append(_names("Commands", schema["commands"]))
    out.append(_names("Requests", schema["requests"]))
    out.append(_names("Notifications", schema["notifications"]))
    out.append(
        "/** Outcomes a run ends with (RunEnded.outcome); any other run status means it is still going. */"
    )
    out.append(f"export const RUN_OUTCOMES = {json.dumps(schema['runOutcomes'])} as const;\n")
    out.append("/** The words of status and reason fields (flowd.protocol.ENUMS). */")
    for name, words in schema["enums"].items():
        const = re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()
        out.append(f"export const {const} = {json.dumps(words)} as const;")
    out.append("")
    out.append(TRAILER)
    for name, definition in schema["$defs"].items():
        out.append("\n".join(_declaration(name, definition)))
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.exit(codegen.main(render, "the extension's protocol.ts"))
