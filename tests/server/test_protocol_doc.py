"""docs/protocol.md describes the declared protocol: a section per method, naming every field of
its params and result (`flowd.protocol`), so the page cannot fall behind the declaration."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, RootModel

from flowd import protocol
from flowd.protocol.models import Params

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "protocol.md"
# LSP's own progress tokens, accepted on every request (docs/protocol.md: `$/progress`).
GENERIC = {name for name in Params.model_fields}


def _fields(model: type[BaseModel] | None) -> list[str]:
    """The wire names of `model`'s own fields; a root union's are its branches'."""
    if model is None:
        return []
    if issubclass(model, RootModel):
        branches = model.model_fields["root"].annotation.__args__  # type: ignore[union-attr]
        return [name for branch in branches for name in _fields(branch)]
    return [field.alias or name for name, field in model.model_fields.items() if name not in GENERIC]


def sections(text: str) -> dict[str, str]:
    """Each `### \\`name\\`` section of the page, by name, up to the next heading."""
    out = {}
    for match in re.finditer(r"^### `([^`]+)`[^\n]*\n(.*?)(?=^##)", text + "\n##", re.S | re.M):
        out[match.group(1)] = match.group(0)
    return out


def undocumented(text: str) -> list[str]:
    found = sections(text)
    missing = []
    for method in protocol.METHODS:
        section = found.get(method.name)
        if section is None:
            missing.append(f"{method.name}: no section")
            continue
        for field in [*_fields(method.params()), *_fields(method.result())]:
            if not re.search(rf"\b{re.escape(field)}\b", section):
                missing.append(f"{method.name}: {field}")
    return missing


def test_every_method_and_its_fields_are_in_docs_protocol_md() -> None:
    missing = undocumented(DOC.read_text(encoding="utf-8"))
    assert missing == [], "docs/protocol.md does not name: " + ", ".join(missing)


def test_a_method_or_field_left_out_of_the_page_is_found() -> None:
    text = DOC.read_text(encoding="utf-8")
    without_section = re.sub(r"^### `flow/graph`", "### `flow/graf`", text, flags=re.M)
    assert "flow/graph: no section" in undocumented(without_section)
    start = text.index("### `flow/cost`")
    end = text.index("###", start + 4)
    without_field = text[:start] + text[start:end].replace("unpricedTokens", "x") + text[end:]
    assert "flow/cost: unpricedTokens" in undocumented(without_field)
