"""`flowd serve --tcp`: loopback only, a real client over a socket."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from tests.server.conftest import SERVER_ENV
from tests.server.tcp_serve import serve_tcp


def test_non_loopback_host_is_refused(repo: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flowd", "serve", "--tcp", "--host", "0.0.0.0"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=30,
        env=SERVER_ENV,
    )
    assert proc.returncode == 2
    assert "--host 0.0.0.0" in proc.stderr and "127.0.0.1" in proc.stderr
    assert proc.stdout == ""


async def _listening(server: asyncio.subprocess.Process) -> tuple[int, Path]:
    """Read the server's stderr until it says where it listens and where its token is."""
    assert server.stderr is not None
    while True:
        line = (await server.stderr.readline()).decode()
        if not line:
            raise AssertionError("flowd serve --tcp exited before listening")
        found = re.search(r"Serving on \('127.0.0.1', (\d+)\); token in (\S+)", line)
        if found:
            return int(found.group(1)), Path(found.group(2))


async def _raw_exchange(port: int, message: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bytes]:
    """Send one framed message (or, with None, a request before initialize); return the reply and
    whatever else arrives until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if message is None:
        message = {"jsonrpc": "2.0", "id": 7, "method": "flow/status", "params": {}}
    body = json.dumps(message).encode()
    writer.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    rest = await asyncio.wait_for(reader.read(), 20)  # EOF: the server closed the connection
    writer.close()
    header, _, payload = rest.partition(b"\r\n\r\n")
    return (json.loads(payload) if payload else None), header


def _initialize(token: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"processId": None, "rootUri": None, "capabilities": {}}
    if token is not None:
        params["initializationOptions"] = {"token": token}
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


async def test_only_a_client_with_the_token_is_served(repo: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**SERVER_ENV, "XDG_RUNTIME_DIR": str(runtime)}
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "flowd", "serve", "--tcp", "--port", "0",
        cwd=repo, env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        port, where = await asyncio.wait_for(_listening(server), 20)
        assert where == runtime / "flowd" / f"serve-{port}.json"
        assert stat.S_IMODE(where.stat().st_mode) == 0o600
        saved = json.loads(where.read_text())
        assert saved["port"] == port and len(saved["token"]) >= 32

        # No token, a wrong token, or anything before initialize: -32600, connection closed.
        for message, wanted in [
            (_initialize(None), "initialize: no token"),
            (_initialize("not-the-token"), "initialize: a wrong token"),
            (None, "the first message must be initialize"),
        ]:
            reply, _ = await _raw_exchange(port, message)
            assert reply is not None and reply["error"]["code"] == -32600, reply
            assert wanted in reply["error"]["message"] and str(where) in reply["error"]["message"]
            assert saved["token"] not in json.dumps(reply)

        client = LanguageClient("tcp-test", "1")
        await client.start_tcp("127.0.0.1", port)
        result = await asyncio.wait_for(
            client.initialize_async(
                lsp.InitializeParams(
                    capabilities=lsp.ClientCapabilities(),
                    root_uri=repo.as_uri(),
                    initialization_options={"token": saved["token"]},
                )
            ),
            20,
        )
        assert result.server_info is not None and result.server_info.name == "flowd"
        client.initialized(lsp.InitializedParams())
        status = await asyncio.wait_for(client.protocol.send_request_async("flow/status", {}), 20)
        assert status.runs == []

        # A second client lacking the token, while the first is served: refused, the first unharmed.
        reply, _ = await _raw_exchange(port, _initialize(None))
        assert reply is not None and reply["error"]["code"] == -32600
        status = await asyncio.wait_for(client.protocol.send_request_async("flow/status", []), 20)
        assert status.runs == []

        await asyncio.wait_for(client.shutdown_async(None), 10)
        client.exit(None)
        assert await asyncio.wait_for(server.wait(), 20) == 0
        await client.stop()
        assert not where.exists()  # the token goes with the server
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()


def test_sigterm_ends_the_server_and_removes_its_token(repo: Path, tmp_path: Path) -> None:
    env = {**SERVER_ENV, "XDG_RUNTIME_DIR": str(tmp_path)}
    server, _, where = serve_tcp(repo, env)
    try:
        assert where.exists()
        server.terminate()
        assert server.wait(timeout=30) == 0
        assert not where.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
