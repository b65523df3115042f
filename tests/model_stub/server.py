"""`ModelStub`: a real HTTP server on 127.0.0.1 standing in for the model services.

Routes (the paths the agents' SDKs post to, under any prefix such as `/v1` or `/v1beta`):
- `…/messages` → Anthropic Messages;
- `…/responses` → OpenAI Responses;
- `…/chat/completions` → Chat Completions;
- `…/models/<model>:streamGenerateContent` (and `:generateContent`) → Gemini.
Anything else is answered 404 in JSON and logged. Every request lands in `log` (and, when
`log_path` is set, one JSON line in that file) with the role recognised, the tokens served and
the fault injected, so a test can compare flowd's trace with what the "model" really served.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.model_stub import apis
from tests.model_stub.brain import Conversation, Reply, decide, role_of


@dataclass
class Fault:
    """Answer matching requests with an HTTP error (or never, `hang`), `times` times (0: always)."""

    status: int = 429
    role: str | None = None  # flowd role recognised from the prompt ("side" for agents' own requests)
    api: str | None = None
    retry_after: float | None = None
    hang: bool = False
    times: int = 1
    message: str | None = None
    # Answer 200 with something that is not the API: "html" (a proxy's page, not SSE), "json"
    # (SSE whose data is not JSON) or "truncated" (the stream stops before its end event).
    garbage: str | None = None
    used: int = 0

    def matches(self, api: str, role: str) -> bool:
        if self.times and self.used >= self.times:
            return False
        return (self.role is None or self.role == role) and (self.api is None or self.api == api)


@dataclass
class LogEntry:
    seq: int
    api: str
    path: str
    model: str
    role: str
    status: int
    tool: str | None = None
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    fault: str | None = None
    at: float = field(default_factory=time.time)


_DEFAULT_MESSAGES = {
    401: "invalid x-api-key",
    429: "Rate limit exceeded: too many requests",
    500: "Internal server error",
    529: "Overloaded",
}


@dataclass
class Delay:
    """Answer matching requests only after `seconds` (the tokens are logged when answered): a
    side request that finishes after its turn's answer, as a slow model's would."""

    seconds: float
    role: str | None = None
    api: str | None = None

    def matches(self, api: str, role: str) -> bool:
        return (self.role is None or self.role == role) and (self.api is None or self.api == api)


class ModelStub:
    def __init__(self, log_path: Path | None = None) -> None:
        self.log: list[LogEntry] = []
        self.faults: list[Fault] = []
        self.delays: list[Delay] = []
        self.log_path = log_path
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelStub:
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hung requests
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ModelStub:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def add_delay(self, delay: Delay) -> Delay:
        with self._lock:
            self.delays.append(delay)
        return delay

    def clear(self) -> None:
        with self._lock:
            self.log.clear()
            self.faults.clear()
            self.delays.clear()

    def served(self, since: int = 0) -> list[LogEntry]:
        """Answered requests (status 200) from log position `since` on."""
        with self._lock:
            return [e for e in self.log[since:] if e.status == 200]

    # -- used by the handler ----------------------------------------------------------------------

    def _fault_for(self, api: str, role: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(api, role):
                    fault.used += 1
                    return fault
        return None

    def _record(self, entry: LogEntry) -> None:
        with self._lock:
            entry.seq = len(self.log) + 1
            self.log.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(asdict(entry)) + "\n")

    def _delay_for(self, api: str, role: str) -> float:
        with self._lock:
            return sum(d.seconds for d in self.delays if d.matches(api, role))

    def _usage(self, body_bytes: int, reply: Reply, api: str) -> apis.Served:
        """Distinct, plausible figures per request: input from the request's size, part of it cached."""
        with self._lock:
            n = len(self.log) + 1
        total_in = max(40, body_bytes // 4) + n % 17
        cache_read = (total_in * 3) // 5 if n % 3 else 0
        cache_write = (total_in - cache_read) // 3 if api == "anthropic" else 0
        reply_len = len(reply.text) + (len(json.dumps(reply.tool.args)) if reply.tool else 0)
        output = 12 + reply_len // 4 + (n * 7) % 23
        return apis.Served(total_in, output, cache_read, cache_write)


Route = tuple[
    str, Callable[[dict[str, Any]], Conversation], Callable[..., list[bytes]], Callable[[int, str], Any]
]


def _route(path: str) -> tuple[Route, str] | None:
    bare = path.split("?", 1)[0]
    if bare.endswith("/messages"):
        return ("anthropic", apis.anthropic_conversation, apis.anthropic_events, apis.anthropic_error), ""
    if bare.endswith("/responses"):
        return ("responses", apis.responses_conversation, apis.responses_events, apis.openai_error), ""
    if bare.endswith("/chat/completions"):
        return ("chat", apis.chat_conversation, apis.chat_events, apis.openai_error), ""
    if ":streamGenerateContent" in bare or ":generateContent" in bare:
        model = bare.rsplit("/", 1)[-1].split(":", 1)[0]

        def conv(body: dict[str, Any]) -> Conversation:
            return apis.gemini_conversation(body, model)

        return ("gemini", conv, apis.gemini_events, apis.gemini_error), model
    return None


def _route_events(api: str) -> Callable[..., list[bytes]]:
    return {"anthropic": apis.anthropic_events, "responses": apis.responses_events,
            "chat": apis.chat_events, "gemini": apis.gemini_events}[api]  # fmt: skip


def _handler(stub: ModelStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._json(404, {"error": {"message": f"the model stub has no {self.path}"}})
            stub._record(LogEntry(0, "none", self.path, "", "none", 404))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            routed = _route(self.path)
            if routed is None:
                self._json(404, {"error": {"message": f"the model stub has no {self.path}"}})
                stub._record(LogEntry(0, "none", self.path, "", "none", 404))
                return
            (api, to_conv, to_events, to_error), _ = routed
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "the request body is not JSON"}})
                stub._record(LogEntry(0, api, self.path, "", "none", 400))
                return
            conv = to_conv(body)
            role = role_of(conv)
            fault = stub._fault_for(api, role)
            if fault is not None:
                self._fault(fault, api, conv, role, to_error)
                return
            reply = decide(conv)
            if stub._stopping.wait(stub._delay_for(api, role)):
                self.close_connection = True
                return
            served = stub._usage(len(raw), reply, api)
            stub._record(
                LogEntry(0, api, self.path, conv.model, reply.role, 200,
                         reply.tool.name if reply.tool else None,
                         served.input, served.output, served.cache_read, served.cache_write)
            )  # fmt: skip
            if api == "anthropic" and not body.get("stream"):
                self._json(200, apis.anthropic_message(reply, conv.model or "stub-model", served))
                return
            self._stream(to_events(reply, conv.model or "stub-model", served))

        def _fault(self, fault: Fault, api: str, conv: Conversation, role: str, to_error: Any) -> None:
            label = (
                "hang" if fault.hang else f"garbage-{fault.garbage}" if fault.garbage else str(fault.status)
            )
            status = 0 if fault.hang or fault.garbage else fault.status
            stub._record(LogEntry(0, api, self.path, conv.model, role, status, fault=label))
            if fault.garbage:
                self._garbage(fault.garbage, api, conv)
                return
            if fault.hang:
                stub._stopping.wait()
                self.close_connection = True
                return
            message = fault.message or _DEFAULT_MESSAGES.get(fault.status, f"error {fault.status}")
            headers = {}
            if fault.retry_after is not None:
                headers["retry-after"] = f"{fault.retry_after:g}"
            self._json(fault.status, to_error(fault.status, message), headers)

        def _garbage(self, mode: str, api: str, conv: Conversation) -> None:
            if mode == "html":
                page = b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if mode == "json":
                self._stream([b"event: message_start\ndata: {\"type\": \"message_start\", \"mess\n\n",
                              b"data: {not json at all\n\n"])  # fmt: skip
                return
            # "truncated": the first half of a real answer, then the connection closes mid-stream.
            reply = decide(conv)
            whole = b"".join(
                _route_events(api)(reply, conv.model or "stub-model", apis.Served(100, 20, 0, 0))
            )
            self._stream([whole[: len(whole) // 2]], end=False)
            self.close_connection = True

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, events: list[bytes], end: bool = True) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in events:
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            if end:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    return Handler
