"""The daemon's live page: HTTP on 127.0.0.1 and JSON-RPC 2.0 over a WebSocket (`flowd web`).

Each WebSocket at `/rpc?token=…` is one more session of the daemon, speaking the declared protocol
exactly as an editor does (the page sends `initialize`, then `flow/status`, `flow/graph`, …,
commands as `workspace/executeCommand`; it hears the same `flow/*` notifications). Every request
needs the token (a missing or wrong one: 403), a `Host` of `127.0.0.1:<port>` or
`localhost:<port>` (DNS rebinding) and no `Origin` but the page's own (cross-site requests,
WebSockets included). The page loads nothing remote, under a strict CSP. The WebSocket is the few
parts of RFC 6455 a browser uses, written here: the handshake, masked client frames, text,
ping/pong and close (docs/editors.md, "The live page").
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import struct
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from flowd.server.sessions import SessionWriter

log = logging.getLogger(__name__)

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEAD = 16 << 10
MAX_MESSAGE = 4 << 20
FILES = {
    "/": ("page.html", "text/html"),
    "/app.js": ("page.js", "text/javascript"),
    "/app.css": ("page.css", "text/css"),
}


def csp(port: int) -> str:
    here = f"127.0.0.1:{port} localhost:{port}"
    ws = " ".join(f"ws://{h}" for h in here.split())
    return (
        f"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' {ws}; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def refusal(head: dict[str, str], query: dict[str, list[str]], token: str, port: int) -> str | None:
    """Why a request is refused (None: it is the page's own, with the token)."""
    allowed = {f"127.0.0.1:{port}", f"localhost:{port}"}
    if head.get("host") not in allowed:
        return "a Host other than the page's own"
    origin = head.get("origin")
    if origin is not None and origin not in {f"http://{h}" for h in allowed}:
        return "a foreign Origin"
    given = (query.get("token") or [""])[0]
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        return "a missing or wrong token"
    return None


class WebSocketWriter(SessionWriter):
    """A session's writer over a WebSocket: each JSON-RPC message one text frame, bounded as any."""

    def write(self, data: bytes) -> None:
        super().write(frame(0x1, data))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.write(frame(0x8, struct.pack("!H", 1000)))
        super().close()


def frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


async def read_message(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
    """The next whole text message from the client (None: closed). Pings are answered."""
    parts: list[bytes] = []
    while True:
        b0, b1 = await reader.readexactly(2)
        opcode, masked, n = b0 & 0x0F, b1 & 0x80, b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await reader.readexactly(8))
        if not masked or n > MAX_MESSAGE:
            return None  # RFC 6455: a client's frames are masked; an oversized one ends it
        mask = await reader.readexactly(4)
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(await reader.readexactly(n)))
        if opcode == 0x8:
            return None
        if opcode == 0x9:
            writer.write(frame(0xA, payload))
            continue
        if opcode in (0x1, 0x2, 0x0):
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts)


class Sessions(Protocol):
    """What the page needs of the daemon (flowd/server/daemon.py): sessions made and ended."""

    sessions: dict[Any, Any]
    pages: int

    def new_session(self, env: dict[str, str] | None) -> Any: ...
    def end_session(self, server: Any, writer: SessionWriter) -> None: ...


class Web:
    def __init__(self, daemon: Sessions, token: str) -> None:
        self.daemon = daemon
        self.token = token
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self, port: int) -> str:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", port, limit=MAX_HEAD)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.url()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(_read_head(reader), 10)
        except (ValueError, TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        method, target, head = request
        url = urlsplit(target)
        why = refusal(head, parse_qs(url.query), self.token, self.port)
        if why is not None:
            log.warning("page: refused %s %s: %s", method, url.path, why)
            await _respond(writer, 403, "text/plain", f"refused: {why}\n".encode(), self.port)
        elif url.path == "/rpc" and head.get("upgrade", "").lower() == "websocket":
            await self._websocket(reader, writer, head)
        elif method == "GET" and url.path in FILES:
            name, kind = FILES[url.path]
            body = resources.files("flowd.server").joinpath("page", name).read_bytes()
            await _respond(writer, 200, kind, body.replace(b"__TOKEN__", self.token.encode()), self.port)
        else:
            await _respond(writer, 404, "text/plain", b"not found\n", self.port)
        writer.close()

    async def _websocket(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: dict[str, str]
    ) -> None:
        key = head.get("sec-websocket-key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        writer.write(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        server = self.daemon.new_session(None)
        ws_writer = WebSocketWriter(writer, server.resync)
        server.protocol.set_writer(ws_writer, include_headers=False)  # type: ignore[arg-type]
        self.daemon.sessions[server] = ws_writer
        self.daemon.pages += 1
        try:
            while (message := await read_message(reader, writer)) is not None:
                try:
                    parsed = json.loads(message, object_hook=server.protocol.structure_message)
                    server.protocol.handle_message(parsed)
                except Exception as exc:  # the daemon never dies of a message
                    server.report_server_error(exc, type(exc))  # type: ignore[arg-type]
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.daemon.pages -= 1
            self.daemon.end_session(server, ws_writer)


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    head: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            head[name.strip().lower()] = value.strip()
    return method, target, head


async def _respond(writer: asyncio.StreamWriter, status: int, kind: str, body: bytes, port: int) -> None:
    reason = {200: "OK", 403: "Forbidden", 404: "Not Found"}[status]
    headers = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        f"Content-Security-Policy: {csp(port)}\r\nX-Content-Type-Options: nosniff\r\n"
        "Referrer-Policy: no-referrer\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError, ConnectionError):
        writer.write(headers.encode() + body)
        await writer.drain()


def json_message(value: Any) -> bytes:
    return json.dumps(value).encode()
