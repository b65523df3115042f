"""`flowd serve --tcp`: loopback only, and only for a client that proves it is the user.

Any local account can connect to a loopback port, and the server launches runs with the user's
agents, keys and gates. So at start the server writes a random token to a file only the user can
read (`token_file`), and the first message on a connection must be `initialize` carrying
`initializationOptions.token`. Until it arrives nothing reaches the language server; a missing or
wrong token is answered with -32600 and that connection is closed, while the server keeps
listening for the user's client. One session is served, as with pygls' own TCP server: when it
ends, the server exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from pygls.io_ import run_async
from pygls.lsp.server import LanguageServer

from flowd.base.fsio import write_text_atomic

log = logging.getLogger(__name__)

HEADER = re.compile(rb"^Content-Length: *(\d+)\r\n$", re.IGNORECASE)
MAX_FIRST_MESSAGE = 1 << 20  # an initialize is a few kB; refuse to buffer more from a stranger
FIRST_MESSAGE_TIMEOUT_S = 30.0
INVALID_REQUEST = -32600


def token_file(port: int) -> Path:
    """`$XDG_RUNTIME_DIR/flowd/serve-<port>.json`, else `~/.cache/flowd/serve-<port>.json`."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "flowd" / f"serve-{port}.json"


def write_token(port: int, token: str) -> Path:
    path = token_file(port)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    old = os.umask(0o077)  # the temp file is born 0600: the token is never readable by others
    try:
        write_text_atomic(path, json.dumps({"port": port, "token": token}) + "\n")
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return path


class _Replay:
    """A stream reader that first hands back the bytes already read (the checked `initialize`)."""

    def __init__(self, first: bytes, reader: asyncio.StreamReader) -> None:
        self._buffer = first
        self._reader = reader

    async def readline(self) -> bytes:
        if self._buffer:
            line, sep, rest = self._buffer.partition(b"\n")
            self._buffer = rest
            return line + sep
        return await self._reader.readline()

    async def readexactly(self, n: int) -> bytes:
        if self._buffer:
            head, self._buffer = self._buffer[:n], self._buffer[n:]
            if len(head) < n:
                head += await self._reader.readexactly(n - len(head))
            return head
        return await self._reader.readexactly(n)


async def _first_message(reader: asyncio.StreamReader) -> tuple[bytes, Any]:
    """The raw bytes and the decoded body of the connection's first framed message."""
    raw, length = b"", None
    while True:
        line = await reader.readline()
        if not line:
            raise ConnectionError("closed before its first message")
        raw += line
        if len(raw) > MAX_FIRST_MESSAGE:
            raise ValueError("headers too long")
        match = HEADER.match(line)
        if match:
            length = int(match.group(1))
        if line in (b"\r\n", b"\n"):
            break
    if length is None or length > MAX_FIRST_MESSAGE:
        raise ValueError("no usable Content-Length")
    body = await reader.readexactly(length)
    return raw + body, json.loads(body)


def _refusal(message: Any, text: str) -> bytes:
    msg_id = message.get("id") if isinstance(message, dict) else None
    if not isinstance(msg_id, int | str) or isinstance(msg_id, bool):
        msg_id = None
    body = json.dumps(
        {"jsonrpc": "2.0", "id": msg_id, "error": {"code": INVALID_REQUEST, "message": text}}
    ).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def check_token(message: Any, token: str, where: Path) -> str | None:
    """Why `message` may not open a session (None: it may)."""
    hint = (
        f"send initializationOptions.token, read from {where} (readable by the user who started the server)"
    )
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return f"flowd serve --tcp: the first message must be initialize; {hint}"
    params = message.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    given = options.get("token") if isinstance(options, dict) else None
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), token.encode()):
        what = "a wrong" if isinstance(given, str) else "no"
        return f"initialize: {what} token; {hint}"
    return None


def serve_tcp(server: LanguageServer, host: str, port: int) -> None:
    """Listen on `host:port` (0: any free port) and serve the first client holding the token."""
    token = secrets.token_urlsafe(32)
    stop_event = threading.Event()
    server._stop_event = stop_event  # shutdown()/exit set it, as in pygls' own transports
    state: dict[str, Any] = {"busy": False, "file": None}

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        where: Path = state["file"]
        try:
            raw, message = await asyncio.wait_for(_first_message(reader), FIRST_MESSAGE_TIMEOUT_S)
            problem = check_token(message, token, where)
            if problem is None and state["busy"]:
                problem = "flowd serve --tcp: already serving a client; start another server"
        except (ConnectionError, ValueError, TimeoutError, asyncio.IncompleteReadError) as exc:
            message, problem = None, f"flowd serve --tcp: could not read an initialize request ({exc})"
        if problem is not None:
            log.warning("refused a TCP client: %s", problem)
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(_refusal(message, problem))
                await writer.drain()
            writer.close()
            return
        state["busy"] = True
        server.protocol.set_writer(writer)  # type: ignore[arg-type]
        await run_async(
            stop_event=stop_event,
            reader=_Replay(raw, reader),
            protocol=server.protocol,
            logger=log,
            error_handler=server.report_server_error,
        )
        server.shutdown()  # type: ignore[no-untyped-call]

    async def main() -> None:
        listener = await asyncio.start_server(connection, host, port)
        server._server = listener  # type: ignore[attr-defined]  # pygls' shutdown() closes it
        # A SIGTERM ends the server like a shutdown, so the token file goes with it.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.shutdown)
        bound = int(listener.sockets[0].getsockname()[1])
        state["file"] = write_token(bound, token)
        # Clients and tests wait for this line; the token itself is only in the file.
        print(
            f"flowd serve: Serving on ('{host}', {bound}); token in {state['file']}",
            file=sys.stderr,
            flush=True,
        )
        try:
            async with listener:
                await listener.serve_forever()
        finally:
            with contextlib.suppress(OSError):
                state["file"].unlink()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(main())
