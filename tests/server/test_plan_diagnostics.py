"""Plan files validated as they are opened and edited: each violation at its story or field."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp

from tests.server.conftest import FlowClient, cleared, command

BAD_JSON = """{
  "epicId": "demo",
  "stories": [
    {"id": "api", "title": "API", "owned": ["src/api/"]},
    {"id": "Bad_Id", "title": "Bad", "owned": []}
  ]
}
"""
GOOD_JSON = BAD_JSON.replace('"Bad_Id"', '"bad-id"').replace('"owned": []', '"owned": ["src/bad/"]')

BAD_MD = (
    "# The plan\n\nSome prose first.\n\n```json storyplan\n"
    + BAD_JSON.replace('"owned": []', '"owned": ["src/api/x.py"]')
    + "```\n"
)


def _open(client: FlowClient, path: Path, text: str, language: str) -> None:
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=path.as_uri(), language_id=language, version=1, text=text)
        )
    )


def _replace_all(client: FlowClient, path: Path, text: str, version: int) -> None:
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
            content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def test_json_plan_violations_at_their_lines_and_cleared_when_fixed(
    client: FlowClient, repo: Path
) -> None:
    path = repo / "auth.epic.json"
    path.write_text(BAD_JSON)
    uri = path.as_uri()
    _open(client, path, BAD_JSON, "json")
    found = await client.until(lambda: client.diagnostics.get(uri), what="plan diagnostics")
    by_code = {d.code: d for d in found}
    assert set(by_code) == {"plan.badId", "plan.ownsNothing"}
    assert all(d.source == "flowd" and d.severity == lsp.DiagnosticSeverity.Error for d in found)
    bad_id = by_code["plan.badId"].range
    assert (bad_id.start.line, bad_id.start.character, bad_id.end.character) == (4, 11, 19)
    assert by_code["plan.ownsNothing"].range.start.line == 4
    assert BAD_JSON.splitlines()[4][bad_id.start.character : bad_id.end.character] == '"Bad_Id"'

    _replace_all(client, path, GOOD_JSON, 2)
    await client.until(lambda: cleared(client, uri), what="diagnostics cleared")


async def test_markdown_plan_violations_at_their_lines(client: FlowClient, repo: Path) -> None:
    path = repo / "plan.md"
    path.write_text(BAD_MD)
    uri = path.as_uri()
    _open(client, path, BAD_MD, "markdown")
    found = await client.until(lambda: client.diagnostics.get(uri), what="markdown plan diagnostics")
    by_code = {d.code: d for d in found}
    assert "plan.badId" in by_code
    assert "plan.overlap" in by_code
    bad_line = by_code["plan.badId"].range.start.line
    assert '"Bad_Id"' in BAD_MD.splitlines()[bad_line]
    assert bad_line == 9  # five lines of prose and fence before the JSON

    fixed = BAD_MD.replace('"Bad_Id"', '"bad-id"').replace('"src/api/x.py"', '"src/bad/"')
    _replace_all(client, path, fixed, 2)
    await client.until(lambda: cleared(client, uri), what="diagnostics cleared")


async def test_ordinary_files_get_no_plan_diagnostics(client: FlowClient, repo: Path) -> None:
    notes = repo / "notes.md"
    notes.write_text("# notes\n\n```json\n{}\n```\n")
    plan = repo / "p.epic.json"
    plan.write_text(BAD_JSON)
    _open(client, notes, notes.read_text(), "markdown")
    _open(client, plan, BAD_JSON, "json")  # its diagnostics arriving means the notes were handled first
    await client.until(lambda: client.diagnostics.get(plan.as_uri()), what="plan diagnostics")
    assert not client.diagnostics.get(notes.as_uri())


async def test_validate_plan_command(client: FlowClient, repo: Path) -> None:
    (repo / "plans").mkdir()
    bad = repo / "plans" / "bad.epic.json"
    bad.write_text(BAD_JSON)
    result = await command(client, "flow.validatePlan", {"plan": "plans/bad.epic.json"})
    assert len(result["violations"]) == 2
    assert result["violations"][0].startswith("5:12: ")
    # It also publishes them for the file, open or not.
    assert {d.code for d in client.diagnostics[bad.as_uri()]} == {"plan.badId", "plan.ownsNothing"}

    good = repo / "plans" / "good.epic.json"
    good.write_text(GOOD_JSON)
    assert await command(client, "flow.validatePlan", {"plan": good.as_uri()}) == {"violations": []}
    assert await command(client, "flow.validatePlan", {"plan": str(good)}) == {"violations": []}
