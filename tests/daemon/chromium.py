"""A real headless chromium driven over its DevTools protocol (Debian's `/usr/bin/chromium`, the
browser `make test-e2e` drives): open a page, read it, click a button, take a screenshot. Used by
tests/daemon/test_page_browser.py and bench/page_screenshot.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.daemon.ws_client import WebSocket

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Chromium:
    """One headless chromium with one page; `close` stops it and removes its profile."""

    def __init__(self) -> None:
        self.port = free_port()
        self.profile = tempfile.mkdtemp(prefix="flowd-chromium-")
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={self.port}",
             f"--user-data-dir={self.profile}", "--window-size=1280,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # Its singleton socket's folder goes to TMPDIR and outlives a terminated browser:
            # inside the profile, it is removed with it (not left in /tmp).
            env={**os.environ, "TMPDIR": self.profile},
        )  # fmt: skip
        try:
            self.ws = self._attach()
            self.call("Page.enable")
        except BaseException:
            self.close()
            raise

    def _attach(self) -> WebSocket:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list") as answer:
                    target = next(t for t in json.load(answer) if t["type"] == "page")
                break
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        ws = WebSocket(self.port, target["webSocketDebuggerUrl"].split(str(self.port), 1)[1],
                       {"Host": f"127.0.0.1:{self.port}"})  # fmt: skip
        if ws.status != 101:
            raise RuntimeError(f"chromium refused the DevTools connection ({ws.status})")
        return ws

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.ws.request(method, params or {}, jsonrpc=False)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result") or {})

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get(
            "value"
        )

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def click(self, label: str) -> bool:
        """Click the first button whose text is `label`; False when there is none."""
        script = (
            "(b => b ? (b.click(), true) : false)([...document.querySelectorAll('button')]"
            f".find(b => b.textContent.trim() === {json.dumps(label)}))"
        )
        return bool(self.evaluate(script))

    def screenshot(self, out: Path) -> None:
        shot = self.call("Page.captureScreenshot", {"format": "png"})
        out.write_bytes(base64.b64decode(str(shot["data"])))

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
