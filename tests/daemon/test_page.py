"""The live page with real HTTP requests and a real WebSocket: refused without the token, with a
wrong one, a foreign `Origin` or `Host`; served, and speaking the declared protocol, with them
(docs/editors.md, "The live page")."""

from __future__ import annotations

import http.client
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from flowd.daemon import place
from tests.daemon.test_daemon import daemons_of, repo  # noqa: F401  (the repository fixture)
from tests.daemon.ws_client import WebSocket


@pytest.fixture
def page(repo: Path) -> Iterator[tuple[int, str]]:  # noqa: F811
    done = subprocess.run(
        [sys.executable, "-m", "flowd", "web", "--no-open"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    url = urlsplit(done.stdout.splitlines()[-1])
    assert url.scheme == "http" and url.hostname == "127.0.0.1" and url.path == "/"
    assert url.port is not None
    yield url.port, parse_qs(url.query)["token"][0]


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("GET", path, skip_host=True)
    for name, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items():
        conn.putheader(name, value)
    conn.endheaders()
    answer = conn.getresponse()
    result = answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    conn.close()
    return result


def test_the_page_is_served_with_its_token_under_a_strict_csp(repo: Path, page: tuple[int, str]) -> None:  # noqa: F811
    port, token = page
    status, headers, body = get(port, f"/?token={token}")
    assert status == 200 and b"<title>flowd</title>" in body
    csp = headers["content-security-policy"]
    assert (
        "default-src 'none'" in csp
        and "script-src 'self'" in csp
        and "http" not in body.decode().split("<body>")[0]
    )
    for asset in ("/app.js", "/app.css"):
        assert get(port, f"{asset}?token={token}")[0] == 200
    info = place.info_path(repo)
    assert (
        stat.S_IMODE(info.stat().st_mode) == 0o600 and json.loads(info.read_text())["web"]["token"] == token
    )
    shown = subprocess.run(
        [sys.executable, "-m", "flowd", "daemon", "status", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert json.loads(shown.stdout)["web"] == {"url": f"http://127.0.0.1:{port}/?token={token}"}


@pytest.mark.parametrize(
    "path, headers",
    [
        ("/", {}),
        ("/?token=wrong", {}),
        ("/app.js", {}),
        ("/?token={token}", {"Origin": "http://evil.example"}),
        ("/?token={token}", {"Host": "evil.example:{port}"}),
        ("/?token={token}", {"Host": "127.0.0.1:1"}),
    ],
    ids=["no-token", "wrong-token", "asset-without-token", "foreign-origin", "foreign-host", "other-port"],
)
def test_the_page_refuses_with_403(page: tuple[int, str], path: str, headers: dict[str, str]) -> None:
    port, token = page
    filled = {k: v.format(port=port) for k, v in headers.items()}
    status, _headers, body = get(port, path.format(token=token), filled)
    assert status == 403 and token.encode() not in body


@pytest.mark.parametrize(
    "query, headers",
    [("", {}), ("?token=wrong", {}), ("?token={token}", {"Origin": "http://evil.example"})],
    ids=["no-token", "wrong-token", "foreign-origin"],
)
def test_the_websocket_is_refused_before_any_message(
    page: tuple[int, str], query: str, headers: dict[str, str]
) -> None:
    port, token = page
    ws = WebSocket(port, "/rpc" + query.format(token=token), {"Host": f"127.0.0.1:{port}", **headers})
    try:
        assert ws.status == 403
    finally:
        ws.close()


def test_the_websocket_speaks_the_declared_protocol(repo: Path, page: tuple[int, str]) -> None:  # noqa: F811
    port, token = page
    ws = WebSocket(
        port, f"/rpc?token={token}", {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
    )
    try:
        assert ws.status == 101
        assert "flow.answer" in ws.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})[
            "result"]["capabilities"]["executeCommandProvider"]["commands"]  # fmt: skip
        ws.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        assert ws.request("flow/status", {})["result"] == {"runs": []}
        bad = ws.request(
            "workspace/executeCommand", {"command": "flow.cancelEpic", "arguments": [{"runId": "nope"}]}
        )
        assert bad["error"]["code"] == -32602 and "nope" in bad["error"]["message"]
        assert ws.request("flow/nothing", {})["error"]["code"] == -32601
    finally:
        ws.close()
    assert len(daemons_of(repo)) == 1 and os.environ.get("XDG_RUNTIME_DIR")
