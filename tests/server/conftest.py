"""A real `flowd serve` subprocess driven by pytest-lsp, with recorded client capabilities."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from flowd import protocol

FLOW_NOTIFICATIONS = tuple(m.name for m in protocol.NOTIFICATIONS)
GIT_ENV = {
    "GIT_AUTHOR_NAME": "flowd test",
    "GIT_AUTHOR_EMAIL": "test@flowd.invalid",
    "GIT_COMMITTER_NAME": "flowd test",
    "GIT_COMMITTER_EMAIL": "test@flowd.invalid",
}


def _plain(value: Any) -> Any:
    """pygls hands custom params over as namedtuples: back to plain JSON-like values."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class FlowClient(LanguageClient):
    """Records every `flow/*` notification in arrival order, and wakes waiters on any message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flow: list[tuple[str, dict[str, Any]]] = []
        self.registrations: list[lsp.Registration] = []
        self._tick = asyncio.Event()

    def poke(self) -> None:
        self._tick.set()

    async def until(self, predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
        """Wait until `predicate()` is truthy, re-checking whenever the server sends something."""

        async def loop() -> Any:
            while True:
                self._tick.clear()
                value = predicate()
                if value:
                    return value
                await self._tick.wait()

        try:
            return await asyncio.wait_for(loop(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what or predicate}") from None

    def of(self, method: str) -> list[dict[str, Any]]:
        return [params for m, params in self.flow if m == method]


def make_client() -> FlowClient:
    from pygls.protocol import default_converter
    from pytest_lsp.client import register_lsp_features

    client = FlowClient(converter_factory=default_converter)
    register_lsp_features(client)

    for method in FLOW_NOTIFICATIONS:

        def record(ls: FlowClient, params: Any, method: str = method) -> None:
            ls.flow.append((method, _plain(params)))
            ls.poke()

        client.feature(method)(record)

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register(ls: FlowClient, params: lsp.RegistrationParams) -> None:
        ls.registrations.extend(params.registrations)

    # Wrap the recorders pytest-lsp installs so diagnostics and progress wake waiters too.
    fm = client.protocol.fm
    for method in (lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, lsp.PROGRESS):
        inner = fm.features[method]

        def wrapped(params: Any, inner: Any = inner) -> Any:
            result = inner(params)
            client.poke()
            return result

        fm.features[method] = wrapped
    return client


SERVER_ENV = {**os.environ, **GIT_ENV, "FLOWD_LOG": os.environ.get("FLOWD_LOG", "WARNING")}
CONFIG = ClientServerConfig(
    server_command=[sys.executable, "-m", "flowd", "serve"], client_factory=make_client, server_env=SERVER_ENV
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env={**os.environ, **GIT_ENV}
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("# test repo\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


async def initialize(
    client: FlowClient, root: Path, preset: str = "visual-studio-code"
) -> lsp.InitializeResult:
    return await client.initialize_session(
        lsp.InitializeParams(
            capabilities=client_capabilities(preset),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        )
    )


@pytest_lsp.fixture(config=CONFIG, params=["visual-studio-code", "neovim"])
async def client(lsp_client: FlowClient, repo: Path, request: pytest.FixtureRequest) -> Any:
    """A server over an empty repository, initialised with a real editor's recorded capabilities."""
    lsp_client.preset = request.param  # type: ignore[attr-defined]
    lsp_client.init_result = await initialize(lsp_client, repo, request.param)  # type: ignore[attr-defined]
    yield
    await asyncio.wait_for(lsp_client.shutdown_session(), 10)


async def request(client: LanguageClient, method: str, params: Any) -> Any:
    return await asyncio.wait_for(client.protocol.send_request_async(method, params), 20)


async def command(client: LanguageClient, name: str, *arguments: Any) -> Any:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(
            lsp.ExecuteCommandParams(command=name, arguments=list(arguments))
        ),
        60,
    )


def cleared(client: LanguageClient, uri: str) -> bool:
    """Diagnostics were published for `uri`, and the last publication was empty."""
    return uri in client.diagnostics and len(client.diagnostics[uri]) == 0


async def stop_client(client: LanguageClient) -> None:
    """Stop a client started by hand; kill its server if it does not exit.

    The server's stdin is closed first, as an editor going away does: a test that failed before
    its `shutdown`/`exit` must not be reported as a server that would not exit (an open stdin
    keeps a server alive by design), and a server that ignores EOF still fails here.
    """
    server = getattr(client, "_server", None)
    if server is not None and server.returncode is None and server.stdin is not None:
        server.stdin.close()
    try:
        # A bound for a loaded machine (parallel workers, other checkouts), not a speed check.
        await asyncio.wait_for(client.stop(), 30)
    except TimeoutError:
        if server is not None and server.returncode is None:
            server.kill()
            await server.wait()
        raise AssertionError("the server did not exit after shutdown/exit") from None
