"""The server on a repository under a folder whose name has a space and characters a URI escapes:
the editor's open documents are found by the URI it sent (pygls keys them unquoted), and their
diagnostics come back under that URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import FlowClient, git
from tests.server.test_plan_diagnostics import BAD_JSON, _open, _replace_all


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / 'my projects #1 "we:ird" %20 ü' / "repo"
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# test repo\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


async def test_an_open_plan_is_checked_from_the_editors_text(client: FlowClient, repo: Path) -> None:
    plan = repo / "p.epic.json"
    plan.write_text("{}\n")  # on disk: not what the editor shows
    _open(client, plan, BAD_JSON, "json")
    uri = plan.as_uri()
    assert "%20" in uri
    found = await client.until(lambda: client.diagnostics.get(uri), what="plan diagnostics")
    assert {d.code for d in found} == {"plan.badId", "plan.ownsNothing"}
    _replace_all(client, plan, BAD_JSON.replace('"Bad_Id"', '"bad-id"'), 2)
    await client.until(lambda: len(client.diagnostics.get(uri, [])) == 1, what="one violation left")
