"""`flowd serve`'s forwarder: the editor's stdio relayed to the repository's daemon.

It reads the editor's `initialize` to learn the workspace, finds the repository's main checkout,
and joins its daemon (starting it, or replacing an older one). The session sends the forwarder's
environment, so a run launched from it starts with the editor's PATH and keys. What a reconnect
needs is kept: the `initialize`, whether `initialized` was sent, and each open document's
messages; if the daemon goes away while the editor still talks, the forwarder starts or joins a
new one and replays them, so the editor needs no restart (requests lost on the way are answered
with an error). When no daemon can serve, the caller serves in-process (`Fallback`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from flowd.base.errors import FlowdError
from flowd.daemon import client

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803
CONTROL = "$/flowd/daemon"  # the daemon's word to its forwarders; never reaches the editor
RECONNECTS = 3


@dataclass
class Fallback:
    """Serve in-process: `buffered` is what was read of the editor's input already."""

    buffered: bytes
    why: str | None = None


def read_frame(stream: BinaryIO) -> bytes | None:
    """One LSP message body (None at the end of the stream)."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            if length is None:
                continue
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            # A length that is no length (`abc`, `-5`) frames nothing: its header block is
            # skipped, as the in-process server skips it, and the next one read.
            with contextlib.suppress(ValueError):
                length = int(value.strip())
            if length is not None and length < 0:
                length = None
    body = stream.read(length)
    return body if len(body) == length else None


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def workspace_of(initialize: dict[str, Any]) -> Path:
    params = initialize.get("params") or {}
    candidates: list[Any] = [params.get("rootUri")]
    candidates += [f.get("uri") for f in params.get("workspaceFolders") or [] if isinstance(f, dict)]
    for uri in candidates:
        if isinstance(uri, str) and uri.startswith("file:"):
            return Path(unquote(urlparse(uri).path))
    if isinstance(params.get("rootPath"), str):
        return Path(params["rootPath"])
    return Path.cwd()


def main_checkout(where: Path) -> Path | None:
    """The main checkout of the repository holding `where` (None: not in a non-bare repository)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=where, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    common = Path(out)
    if common.name != ".git" or not common.is_dir():
        return None
    return common.parent.resolve()


@dataclass
class Replay:
    """What a new daemon is told so the session goes on as it was."""

    initialize: dict[str, Any] | None = None
    initialized: bool = False
    documents: dict[str, list[bytes]] = field(default_factory=dict)
    pending: dict[Any, str] = field(default_factory=dict)  # the editor's requests awaiting answers
    exiting: bool = False

    def note(self, message: dict[str, Any], body: bytes) -> bool:
        """Record `message`; True when it is a document's message (a replay re-sends it)."""
        method = message.get("method")
        if isinstance(method, str) and isinstance(message.get("id"), int | str):
            self.pending[message["id"]] = method
        if method == "initialize":
            self.initialize = message
        elif method == "initialized":
            self.initialized = True
        elif method == "exit":
            self.exiting = True
        elif method in ("textDocument/didOpen", "textDocument/didChange", "textDocument/didClose"):
            uri = str((message.get("params") or {}).get("textDocument", {}).get("uri"))
            if method == "textDocument/didClose":
                self.documents.pop(uri, None)
            else:
                self.documents.setdefault(uri, []).append(body)
            return True
        return False


class Forwarder:
    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.root: Path | None = None
        self.replay = Replay()
        self.conn: client.Connection | None = None
        self._out = threading.Lock()
        self._send_lock = threading.Lock()
        self._connected = threading.Event()
        self._swallow: set[Any] = set()
        self._done = threading.Event()
        self._generation = 0

    # -- the editor's side ---------------------------------------------------------------------
    def to_editor(self, body: bytes) -> None:
        with self._out:
            self.stdout.write(frame(body))
            self.stdout.flush()

    def show(self, text: str, kind: int = 2) -> None:
        message = {
            "jsonrpc": "2.0",
            "method": "window/showMessage",
            "params": {"type": kind, "message": text},
        }
        self.to_editor(json.dumps(message).encode())

    # -- the daemon's side ---------------------------------------------------------------------
    def _open(self) -> str | None:
        assert self.root is not None
        conn, replaced = client.open_session(self.root, "lsp", env=dict(os.environ))
        self.conn = conn
        self._generation += 1
        return replaced

    def _send(self, body: bytes) -> bool:
        conn = self.conn
        if conn is None:
            return False
        try:
            with self._send_lock:
                conn.sock.sendall(frame(body))
            return True
        except OSError:
            return False

    def _replay(self) -> None:
        """A new daemon hears the session's initialize, initialized and open documents."""
        assert self.replay.initialize is not None
        first = dict(self.replay.initialize)
        first["id"] = f"flowd-replay-{self._generation}"
        self._swallow.add(first["id"])
        self._send(json.dumps(first).encode())
        if self.replay.initialized:
            self._send(b'{"jsonrpc": "2.0", "method": "initialized", "params": {}}')
        for bodies in list(self.replay.documents.values()):
            for body in bodies:
                self._send(body)

    def run(self) -> int | Fallback:
        body = read_frame(self.stdin)
        if body is None:
            return 0
        try:
            first = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser (hostile input)
            return Fallback(frame(body))
        self.root = main_checkout(workspace_of(first if isinstance(first, dict) else {}))
        if self.root is None or not isinstance(first, dict):
            return Fallback(frame(body))  # not a repository: served in-process, as before
        try:
            replaced = self._open()
        except FlowdError as exc:
            return Fallback(frame(body), str(exc))
        self.replay.note(first, body)
        self._send(body)
        self._connected.set()
        threading.Thread(target=self._from_daemon, name="from-daemon", daemon=True).start()
        if replaced:
            self.show(replaced, kind=3)
        # The editor's side in a thread too: the session ends when either side does (the editor
        # closed its input, or the daemon closed the session after `exit`).
        threading.Thread(target=self._from_editor, name="from-editor", daemon=True).start()
        self._done.wait()
        if self.conn is not None:
            self.conn.close()
        return 0

    def _from_editor(self) -> None:
        while not self._done.is_set():
            body = read_frame(self.stdin)
            if body is None:
                self._done.set()
                return
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser (hostile input)
                message = None
            document = isinstance(message, dict) and self.replay.note(message, body)
            while not self._send(body):
                # The daemon went away: the reader reconnects (and replays documents itself).
                self._connected.clear()
                if not self._connected.wait(timeout=client.START_TIMEOUT_S + 10) or self._done.is_set():
                    return
                if document:
                    break

    def _from_daemon(self) -> None:
        while True:
            conn = self.conn
            assert conn is not None
            try:
                body = read_frame(conn.reader)  # type: ignore[arg-type]
            except (OSError, ValueError):
                body = None  # reset by a killed daemon: as gone as a closed one
            if body is None:
                if self.replay.exiting or not self._reconnect("the daemon went away"):
                    self._done.set()
                    return
                continue
            self._relay(body)

    def _relay(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser (hostile input)
            message = None
        if isinstance(message, dict):
            if message.get("method") == CONTROL:
                self._control(message.get("params") or {})
                return
            if "method" not in message and isinstance(message.get("id"), int | str):
                if message["id"] in self._swallow:
                    self._swallow.discard(message["id"])
                    return
                self.replay.pending.pop(message["id"], None)
        self.to_editor(body)

    def _control(self, params: dict[str, Any]) -> None:
        text = params.get("message")
        if isinstance(text, str) and text:
            self.show(text, kind=3 if params.get("state") == "replaced" else 2)
        if params.get("state") == "stopped":
            self.replay.exiting = True  # `flowd daemon stop`: this session ends with it

    def _reconnect(self, why: str) -> bool:
        self._connected.clear()
        if self.conn is not None:
            self.conn.close()
        for pending_id, method in list(self.replay.pending.items()):
            error = {"code": REQUEST_FAILED, "message": f"{method}: {why} before answering; try again"}
            self.to_editor(json.dumps({"jsonrpc": "2.0", "id": pending_id, "error": error}).encode())
        self.replay.pending.clear()
        for _ in range(RECONNECTS):
            try:
                replaced = self._open()
            except FlowdError as exc:
                last = str(exc)
                continue
            log.info("reconnected to the daemon (%s)", why)
            self._replay()
            self._connected.set()
            if replaced:
                self.show(replaced, kind=3)
            return True
        self.show(f"flowd: {why} and could not be restarted: {last}; restart the language server", kind=1)
        return False
