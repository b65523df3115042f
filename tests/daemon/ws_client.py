"""A minimal WebSocket client (RFC 6455, masked frames) over a real TCP connection, for the page's
tests: the handshake with chosen headers, text messages out and in."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any


class WebSocket:
    def __init__(self, port: int, path: str, headers: dict[str, str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]  # fmt: skip
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.file = self.sock.makefile("rb")
        self.status = int(self.file.readline().split()[1])
        while self.file.readline() not in (b"\r\n", b""):
            pass
        self._next = 0

    def send(self, value: Any) -> None:
        data = json.dumps(value).encode()
        mask = os.urandom(4)
        n = len(data)
        head = struct.pack("!BB", 0x81, 0x80 | n) if n < 126 else struct.pack("!BBH", 0x81, 0x80 | 126, n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def receive(self) -> dict[str, Any] | None:
        head = self.file.read(2)
        if len(head) < 2:
            return None
        opcode, n = head[0] & 0x0F, head[1] & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self.file.read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self.file.read(8))
        payload = self.file.read(n)
        if opcode == 0x8:
            return None
        return dict(json.loads(payload))

    def request(self, method: str, params: Any, *, jsonrpc: bool = True) -> dict[str, Any]:
        """Send a request (`jsonrpc`: with the JSON-RPC 2.0 member; DevTools wants it absent)."""
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        self.send({"jsonrpc": "2.0", **message} if jsonrpc else message)
        while (message := self.receive()) is not None:
            if message.get("id") == self._next and "method" not in message:
                return message
        raise AssertionError(f"the page's socket closed before answering {method}")

    def close(self) -> None:
        self.sock.close()
