"""The scripted agent's JSON-RPC 2.0 over stdio (docs/scripted-agent.md "Wire"): newline-delimited
messages, the agent's own requests waiting for the client's answers, bad params itemised as the
`acp` SDK words them, and the read loop that hands each request to the agent.

Requests are answered in the reader thread, except `session/prompt`, which runs in a thread of
its own so that `session/cancel` and the answers to its permission requests get through.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

Json = dict[str, Any]


def warn(message: str) -> None:
    """One line on stderr (the client's log of the agent); stdout is the ACP channel."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"flowd-script: {message}\n")
        sys.stderr.flush()


class RequestError(Exception):
    """A JSON-RPC error answer: `code`, `message` and `data` as the SDK's `RequestError` words them."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def invalid_params(cls, data: Any) -> RequestError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(-32601, "Method not found", {"method": method})

    def wire(self) -> Json:
        return {"code": self.code, "message": self.message, "data": self.data}


class Wire:
    """Newline-delimited JSON-RPC 2.0 on the agent's side: one writer lock, and the requests the
    agent sent (numbered from 0, as the SDK does) waiting for the client's answer."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, tuple[threading.Event, list[Json]]] = {}
        self.closed = False

    def send(self, message: Json) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self.closed:
                return  # the client is gone: nobody reads an answer any more
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError):
                self.closed = True

    def notify(self, method: str, params: Json) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Json) -> Any:
        """Send a request and wait for its answer: the result, or the client's error raised."""
        done = threading.Event()
        slot: list[Json] = []
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = (done, slot)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        done.wait()
        if not slot:
            raise ConnectionError("Connection closed")
        answer = slot[0]
        if "result" in answer:
            return answer["result"]
        if "error" in answer:
            error = answer.get("error") or {}
            raise RequestError(error.get("code", -32603), error.get("message", "Error"), error.get("data"))
        return None

    def answered(self, message: Json) -> None:
        with self._lock:
            waiter = self._pending.pop(message["id"], None) if isinstance(message["id"], int) else None
        if waiter is not None:
            waiter[1].append(message)
            waiter[0].set()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            pending, self._pending = list(self._pending.values()), {}
        for done, _slot in pending:
            done.set()


def _field_errors(params: Any, fields: dict[str, type]) -> list[Json]:
    """Required fields missing or of the wrong JSON type, itemised like pydantic's errors (the
    SDK answered bad params with them under `data.errors`)."""
    if not isinstance(params, dict):
        return [
            {"type": "model_type", "loc": [], "msg": "Input should be a valid dictionary", "input": params}
        ]
    errors: list[Json] = []
    for name, kind in fields.items():
        if name not in params:
            errors.append({"type": "missing", "loc": [name], "msg": "Field required", "input": params})
        elif not isinstance(params[name], kind):
            label = "string" if kind is str else "list"
            errors.append(_error(name, f"{label}_type", f"Input should be a valid {label}", params[name]))
    return errors


def _error(name: str, kind: str, message: str, value: Any) -> Json:
    return {"type": kind, "loc": [name], "msg": message, "input": value}


def invalid_param(name: str, kind: str, message: str, value: Any) -> RequestError:
    return RequestError.invalid_params({"errors": [_error(name, kind, message, value)]})


def checked_params(params: Any, fields: dict[str, type]) -> Json:
    errors = _field_errors(params, fields)
    if errors:
        raise RequestError.invalid_params({"errors": errors})
    return dict(params)


class Handlers(Protocol):
    """The agent behind the wire: each handler takes a request's params and returns its result
    (or raises `RequestError`)."""

    def initialize(self, params: Any) -> Json: ...

    def new_session(self, params: Any) -> Json: ...

    def prompt(self, params: Any) -> Json: ...

    def cancel(self, params: Any) -> None: ...


def serve(agent: Handlers, wire: Wire, lines: BinaryIO) -> None:
    """Read requests, notifications and answers until the client closes stdin."""
    inline: dict[str, Callable[[Any], Json]] = {
        "initialize": agent.initialize,
        "session/new": agent.new_session,
    }
    for line in lines:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            warn(f"not a JSON-RPC message: {line[:200]!r}")
            continue
        if not isinstance(message, dict):
            continue
        method = message.get("method")
        if method is None:
            if "id" in message:
                wire.answered(message)
        elif "id" not in message:
            _notified(agent, method, message.get("params"))
        elif method == "session/prompt":
            threading.Thread(target=_answer, args=(wire, message, agent.prompt), daemon=True).start()
        else:
            _answer(wire, message, inline.get(method))
    wire.close()


def _notified(agent: Handlers, method: Any, params: Any) -> None:
    if method == "session/cancel":
        try:
            agent.cancel(params)
        except RequestError as exc:
            warn(f"session/cancel: {exc.data}")
    elif not (isinstance(method, str) and method.startswith("_")):  # extensions are ignored quietly
        warn(f"notification {method!r} is not handled (method not found)")


def _answer(wire: Wire, message: Json, handler: Callable[[Any], Json] | None) -> None:
    reply: Json = {"jsonrpc": "2.0", "id": message["id"]}
    method = message["method"]
    try:
        if handler is None:
            raise RequestError.method_not_found(str(method))
        reply["result"] = handler(message.get("params"))
    except RequestError as exc:
        reply["error"] = exc.wire()
    except Exception as exc:
        import traceback

        warn(f"unhandled error while handling request method={method}\n{traceback.format_exc()}")
        try:
            data = json.loads(str(exc))
        except ValueError:
            data = {"details": str(exc)}
        reply["error"] = {"code": -32603, "message": "Internal error", "data": data}
    wire.send(reply)
