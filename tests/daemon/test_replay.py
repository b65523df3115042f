"""A forwarder's replay after its daemon is killed: each open document re-opened once with its
latest text, its didChanges applied as they passed (in the session's position encoding), so a
long editing session replays in the size of its documents (docs/editors.md, "One daemon per
repository")."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from flowd.daemon.forward import Replay
from tests.daemon.pipe_client import PipeClient
from tests.daemon.test_daemon import clients, daemons_of, repo, until

__all__ = ["clients", "repo"]  # the fixtures, shared with test_daemon.py

ROCKET = "\U0001f680"  # one character; 2 UTF-16 units, 4 UTF-8 bytes
TYPED = "".join(chr(ord("a") + i % 26) for i in range(300))
CUT = 100  # the last edit deletes the first CUT typed characters again


def plan_text() -> str:
    plan = {
        "epicId": "e",
        "epic": f"{ROCKET} Login",
        "stories": [
            {
                "id": "a",
                "title": "A",
                "description": "d",
                "owned": ["a/"],
                "acceptance": ["x"],
                "dependsOn": [ROCKET],
            }
        ],
    }
    return json.dumps(plan, ensure_ascii=False, indent=2) + "\n"


def units(text: str, encoding: str) -> int:
    return len(text.encode("utf-8")) if encoding == "utf-8" else len(text.encode("utf-16-le")) // 2


def edits(uri: str, encoding: str) -> list[dict[str, Any]]:
    """An editor's didChanges: TYPED typed one character at a time after the rocket in `dependsOn`,
    then the first CUT of them deleted in one range."""
    lines = plan_text().split("\n")
    line = next(i for i, text in enumerate(lines) if text.strip() == f'"{ROCKET}"')
    col = units(lines[line][: lines[line].index(ROCKET) + 1], encoding)
    changes = []
    for version, char in enumerate(TYPED, start=2):
        at = {"line": line, "character": col + version - 2}
        changes.append({"range": {"start": at, "end": at}, "text": char})
    changes.append(
        {
            "range": {
                "start": {"line": line, "character": col},
                "end": {"line": line, "character": col + CUT},
            },
            "text": "",
        }
    )
    return [
        {
            "method": "textDocument/didChange",
            "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
        }
        for version, change in enumerate(changes, start=2)
    ]


def open_message(uri: str) -> dict[str, Any]:
    item = {"uri": uri, "languageId": "json", "version": 1, "text": plan_text()}
    return {"method": "textDocument/didOpen", "params": {"textDocument": item}}


def diagnosed(client: PipeClient, uri: str, after: int, expected: str) -> None:
    """Waits for a publish of `uri`'s diagnostics, after message `after`, holding `expected`
    (the plan's one violation: its unknown dependency, named as the text has it)."""
    client.wait_for(
        lambda m: (
            m.get("method") == "textDocument/publishDiagnostics"
            and m["params"]["uri"] == uri
            and [d["message"] for d in m["params"]["diagnostics"]] == [expected]
            and any(m is later for later in client.messages[after:])
        )
    )


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_a_killed_daemon_gets_each_document_once_with_its_latest_text(
    repo: Path, clients: list[PipeClient], encoding: str
) -> None:
    c = PipeClient(repo)
    clients.append(c)
    capabilities = {"general": {"positionEncodings": [encoding]}}
    answer = c.request(
        "initialize", {"processId": os.getpid(), "rootUri": repo.as_uri(), "capabilities": capabilities}
    )
    assert answer["result"]["capabilities"]["positionEncoding"] == encoding
    c.send({"method": "initialized", "params": {}})
    uri = (repo / "login.epic.json").as_uri()
    c.send(open_message(uri))
    for message in edits(uri, encoding):
        c.send(message)
    expected = f"story 'a' depends on unknown story '{ROCKET}{TYPED[CUT:]}'"
    diagnosed(c, uri, 0, expected)

    (first,) = daemons_of(repo)
    mark = len(c.messages)
    os.kill(first, signal.SIGKILL)
    until(lambda: first not in daemons_of(repo) and len(daemons_of(repo)) == 1)
    # The new daemon was told the document as the editor has it now: the same diagnostic.
    diagnosed(c, uri, mark, expected)
    assert c.request("flow/status")["result"] == {"runs": []}


def test_the_replay_keeps_one_text_per_open_document() -> None:
    replay = Replay()
    uri, other = "file:///r/login.epic.json", "file:///r/gone.md"
    sent = 0
    for message in [open_message(uri), open_message(other), *edits(uri, "utf-16")]:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        sent += len(body)
        assert replay.note(message, body)
    replay.note({"method": "textDocument/didClose", "params": {"textDocument": {"uri": other}}}, b"")
    assert list(replay.documents) == [uri]
    document = replay.documents[uri]
    assert document.version == len(TYPED) + 2
    assert document.text == plan_text().replace(f'"{ROCKET}"', f'"{ROCKET}{TYPED[CUT:]}"')
    reopened = json.loads(document.reopen(uri))
    assert reopened["params"]["textDocument"] == {
        "uri": uri, "languageId": "json", "version": len(TYPED) + 2, "text": document.text,
    }  # fmt: skip
    # What a replay sends is the document's size, not the typing's: 301 didChanges were ~100 KB.
    assert len(document.reopen(uri)) < len(json.dumps(document.text)) + 200 < sent // 50
