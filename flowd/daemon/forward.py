"""`flowd serve`'s forwarder: the editor's stdio relayed to the repository's daemon.

It reads the editor's `initialize` to learn the workspace, finds the repository's main checkout,
and joins its daemon (starting it, or replacing an older one). The session sends the forwarder's
environment, so a run launched from it starts with the editor's PATH and keys. What a reconnect
needs is kept: the `initialize`, whether `initialized` was sent, and each open document's latest
text (each didChange applied as it passes); if the daemon goes away while the editor still
talks, the forwarder starts or joins a new one and replays them, so the editor needs no restart
(requests lost on the way are answered with an error). When no daemon can serve, the caller serves in-process (`Fallback`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

from flowd.base.errors import FlowdError
from flowd.base.layout import as_shared
from flowd.daemon import client

REQUEST_FAILED = -32803
CONTROL = "$/flowd/daemon"  # the daemon's word to its forwarders; never reaches the editor
RECONNECTS = 3


# Plain classes, not dataclasses: importing `dataclasses` (and `inspect` under it) is a few ms of
# every editor reload's start (docs/performance.md, "The repository's daemon (issue 52)").
class Fallback:
    """Serve in-process: `buffered` is what was read of the editor's input already."""

    def __init__(self, buffered: bytes, why: str | None = None) -> None:
        self.buffered = buffered
        self.why = why


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
    _, common = as_shared(Path(out), Path(out))
    if common.name != ".git" or not common.is_dir():
        return None
    return common.parent.resolve()


def _units(char: str, encoding: str) -> int:
    """How many units of the session's position encoding `char` takes (LSP `positionEncoding`)."""
    if encoding == "utf-8":
        return len(char.encode("utf-8", "surrogatepass"))
    if encoding == "utf-32":
        return 1
    return 2 if ord(char) > 0xFFFF else 1


def offset_of(text: str, position: Any, encoding: str) -> int:
    """The index in `text` of an LSP position (a line past the end: the end; a character past the
    line's end: the line's end)."""
    line = int(position.get("line", 0)) if isinstance(position, dict) else 0
    character = int(position.get("character", 0)) if isinstance(position, dict) else 0
    start = 0
    for _ in range(max(line, 0)):
        newline = text.find("\n", start)
        if newline < 0:
            return len(text)
        start = newline + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    at, units = start, 0
    while at < end and units < character:
        units += _units(text[at], encoding)
        at += 1
    return at


def apply_changes(text: str, changes: Any, encoding: str) -> str:
    """`text` after a didChange's `contentChanges`, in order: a change without a range is the
    whole new text, one with a range replaces that range."""
    for change in changes if isinstance(changes, list) else []:
        if not isinstance(change, dict) or not isinstance(change.get("text"), str):
            continue
        span = change.get("range")
        if not isinstance(span, dict):
            text = change["text"]
            continue
        first = offset_of(text, span.get("start"), encoding)
        last = max(first, offset_of(text, span.get("end"), encoding))
        text = text[:first] + change["text"] + text[last:]
    return text


class Document:
    """An open document as the editor last described it: what a replay opens it with."""

    def __init__(self, language: str, version: int, text: str) -> None:
        self.language = language
        self.version = version
        self.text = text

    def reopen(self, uri: str) -> bytes:
        item = {"uri": uri, "languageId": self.language, "version": self.version, "text": self.text}
        message = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}}
        return json.dumps(message).encode()


class Replay:
    """What a new daemon is told so the session goes on as it was. Each open document is kept as
    one text, its didChanges applied as they pass: a replay re-opens it with its latest text, so a
    long editing session replays in the size of its open documents, not of its typing."""

    def __init__(self) -> None:
        self.initialize: dict[str, Any] | None = None
        self.initialized = False
        self.encoding = "utf-16"  # the session's position encoding, as the daemon chose it
        self.documents: dict[str, Document] = {}
        self.pending: dict[Any, str] = {}  # the editor's requests awaiting answers
        self.exiting = False

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
            self._document(method, message.get("params"))
            return True
        return False

    def _document(self, method: str, params: Any) -> None:
        item = params.get("textDocument") if isinstance(params, dict) else None
        if not isinstance(item, dict):
            return
        uri = str(item.get("uri"))
        if method == "textDocument/didClose":
            self.documents.pop(uri, None)
        elif method == "textDocument/didOpen":
            text = item.get("text")
            version = item.get("version")
            self.documents[uri] = Document(
                str(item.get("languageId", "")),
                version if isinstance(version, int) else 0,
                text if isinstance(text, str) else "",
            )
        elif (document := self.documents.get(uri)) is not None:
            document.text = apply_changes(document.text, params.get("contentChanges"), self.encoding)
            if isinstance(item.get("version"), int):
                document.version = item["version"]

    def answered(self, message: dict[str, Any]) -> None:
        """The daemon's answer to the editor's `initialize`: the position encoding it chose."""
        if self.initialize is None or message.get("id") != self.initialize.get("id"):
            return
        result = message.get("result")
        capabilities = result.get("capabilities") if isinstance(result, dict) else None
        chosen = capabilities.get("positionEncoding") if isinstance(capabilities, dict) else None
        self.encoding = chosen if chosen in ("utf-8", "utf-16", "utf-32") else "utf-16"


class Forwarder:
    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.root: Path | None = None
        self.replay = Replay()
        self.conn: client.Connection | None = None
        self._out = threading.Lock()
        self._send_lock = threading.Lock()
        # Held while a message is noted and sent, and while a new daemon is opened and replayed:
        # each document message reaches a daemon once, in the replay or after it.
        self._replay_lock = threading.Lock()
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
        for uri, document in list(self.replay.documents.items()):
            self._send(document.reopen(uri))

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
            with self._replay_lock:
                document = isinstance(message, dict) and self.replay.note(message, body)
                generation, sent = self._generation, self._send(body)
            if not sent and not self._resend(body, generation, document):
                return

    def _resend(self, body: bytes, generation: int, document: bool) -> bool:
        """The daemon went away under `body`: once the reader has reconnected (a new generation,
        replayed), send it there, unless it is a document's message, which the replay carried.
        False: no daemon came back, or the session ended."""
        deadline = time.monotonic() + client.START_TIMEOUT_S + 10
        while not self._done.wait(timeout=0.05) and time.monotonic() < deadline:
            if self._generation == generation or not self._connected.is_set():
                continue
            if document:
                return True
            with self._replay_lock:
                generation = self._generation
                if self._send(body):
                    return True
        return False

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
                self.replay.answered(message)
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
                with self._replay_lock:
                    replaced = self._open()
                    self._replay()
            except FlowdError as exc:
                last = str(exc)
                continue
            import logging  # only here: the forwarder's start imports no logging

            logging.getLogger(__name__).info("reconnected to the daemon (%s)", why)
            self._connected.set()
            if replaced:
                self.show(replaced, kind=3)
            return True
        self.show(f"flowd: {why} and could not be restarted: {last}; restart the language server", kind=1)
        return False
