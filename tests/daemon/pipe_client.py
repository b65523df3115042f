"""A plain LSP client over a `flowd serve` subprocess's pipes, as an editor starts it: a reader
thread collects every message, the test waits for the ones it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowd.daemon.forward import frame, read_frame


class PipeClient:
    def __init__(self, root: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.root = root
        self.process = subprocess.Popen(
            [sys.executable, "-m", "flowd", "serve", *args],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.messages: list[dict[str, Any]] = []
        self._next = 100
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while (body := read_frame(self.process.stdout)) is not None:  # type: ignore[arg-type]
            with self._changed:
                self.messages.append(json.loads(body))
                self._changed.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(frame(json.dumps({"jsonrpc": "2.0", **message}).encode()))
        self.process.stdin.flush()

    def wait_for(self, found: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for message in self.messages:
                    if found(message):
                        return message
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such message; got {self.messages[-5:]}")
                self._changed.wait(min(left, 0.5))

    def request(self, method: str, params: Any = None, timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        msg_id = self._next
        self.send({"id": msg_id, "method": method, "params": params if params is not None else {}})
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def initialize(self) -> dict[str, Any]:
        answer = self.request(
            "initialize",
            {"processId": os.getpid(), "rootUri": self.root.as_uri(), "capabilities": {}},
        )
        self.send({"method": "initialized", "params": {}})
        return answer

    def shown(self) -> list[str]:
        return [
            m["params"]["message"] for m in list(self.messages) if m.get("method") == "window/showMessage"
        ]

    def close(self) -> int:
        if self.process.poll() is None:
            try:
                self.request("shutdown", None, timeout=10)
                self.send({"method": "exit"})
                return self.process.wait(timeout=10)
            except (AssertionError, OSError, subprocess.TimeoutExpired):
                self.process.kill()
        return self.process.wait(timeout=10)
