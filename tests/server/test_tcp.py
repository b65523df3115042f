"""`flowd serve --tcp`: loopback only, a real client over a socket."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from tests.server.conftest import SERVER_ENV


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _listening(server: asyncio.subprocess.Process) -> None:
    """Read the server's stderr until it says it is serving."""
    assert server.stderr is not None
    while True:
        line = await server.stderr.readline()
        if not line:
            raise AssertionError("flowd serve --tcp exited before listening")
        if b"Serving on" in line:
            return


async def test_serves_one_session_over_tcp(repo: Path) -> None:
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flowd",
        "serve",
        "--tcp",
        "--port",
        str(port),
        cwd=repo,
        env=SERVER_ENV,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await asyncio.wait_for(_listening(server), 20)
        client = LanguageClient("tcp-test", "1")
        await client.start_tcp("127.0.0.1", port)
        result = await asyncio.wait_for(
            client.initialize_async(
                lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=repo.as_uri())
            ),
            20,
        )
        assert result.server_info is not None and result.server_info.name == "flowd"
        client.initialized(lsp.InitializedParams())
        status = await asyncio.wait_for(client.protocol.send_request_async("flow/status", {}), 20)
        assert status.runs == []
        await asyncio.wait_for(client.shutdown_async(None), 10)
        client.exit(None)
        assert await asyncio.wait_for(server.wait(), 20) == 0
        await client.stop()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
