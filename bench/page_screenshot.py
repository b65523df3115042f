"""Screenshot flowd's live page in a real headless chromium, after its WebSocket has filled it.

    python bench/page_screenshot.py URL OUT.png [--click TEXT] [--wait S]

Not a benchmark: a tool to look at the page (docs/editors.md, "The live page"). It starts
`/usr/bin/chromium --headless` with a DevTools port, opens URL, waits, optionally clicks the first
button whose text is TEXT (say `approve`), and writes a PNG. Chromium is stopped at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon.ws_client import WebSocket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cdp(ws: WebSocket, method: str, params: dict[str, object] | None = None) -> dict[str, object]:
    answer = ws.request(method, params or {}, jsonrpc=False)
    if "error" in answer:
        raise SystemExit(f"{method}: {answer['error']}")
    return dict(answer.get("result") or {})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--click", default=None)
    parser.add_argument("--wait", type=float, default=3.0)
    args = parser.parse_args()
    port = free_port()
    profile = tempfile.mkdtemp(prefix="flowd-chromium-")
    chromium = subprocess.Popen(
        ["/usr/bin/chromium", "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
         f"--user-data-dir={profile}", "--window-size=1280,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as answer:
                    target = next(t for t in json.load(answer) if t["type"] == "page")
                break
            except (OSError, StopIteration):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        path = target["webSocketDebuggerUrl"].split(str(port), 1)[1]
        ws = WebSocket(port, path, {"Host": f"127.0.0.1:{port}"})
        if ws.status != 101:
            raise SystemExit(f"chromium refused the DevTools connection ({ws.status})")
        cdp(ws, "Page.enable")
        cdp(ws, "Page.navigate", {"url": args.url})
        time.sleep(args.wait)
        if args.click:
            script = (
                "(b => b ? (b.click(), 'clicked') : 'no such button')([...document.querySelectorAll('button')]"
                f".find(b => b.textContent.trim() === {json.dumps(args.click)}))"
            )
            print("click:", cdp(ws, "Runtime.evaluate", {"expression": script}).get("result"))
            time.sleep(args.wait)
        shot = cdp(ws, "Page.captureScreenshot", {"format": "png"})
        Path(args.out).write_bytes(base64.b64decode(str(shot["data"])))
        print(f"wrote {args.out}")
        ws.close()
    finally:
        chromium.terminate()
        chromium.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
