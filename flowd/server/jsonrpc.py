"""The JSON-RPC protocol with two repairs over pygls' defaults.

1. `flow/*` requests keep their params as plain JSON (pygls would turn unknown methods' params
   into namedtuples, mangling keys); handlers validate them with
   the declared models (`flowd/protocol/`, through `params.py`).
2. A request whose params do not fit the LSP type (pygls raises inside its reader loop and never
   answers, leaving the client waiting) is answered with -32602 naming the method.
3. JSON-RPC's own errors that pygls leaves unanswered: a request with an id that is not a number
   or a string (-32600), a body that is not JSON (-32700, `parseError`), and a request after
   `shutdown` (-32600, as the LSP says).
4. No Python traceback ever reaches the client: it goes to the log (stderr).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import attrs
from lsprotocol.types import EXIT, ResponseError
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import LanguageServerProtocol, lsp_method

from flowd import protocol

log = logging.getLogger(__name__)

FLOW_REQUESTS = frozenset(m.name for m in protocol.REQUESTS)


@attrs.define
class RawRequest:
    id: int | str
    method: str
    params: Any = None
    jsonrpc: str = "2.0"


@attrs.define
class _Rejected:
    """A request that could not be decoded: answered with `error`, never dispatched."""

    id: int | str | None
    method: str
    error: JsonRpcException
    jsonrpc: str = "2.0"


class FlowProtocol(LanguageServerProtocol):
    def get_message_type(self, method: str) -> type[Any] | None:  # type: ignore[override]
        if method in FLOW_REQUESTS:
            return RawRequest
        return super().get_message_type(method)

    def structure_message(self, data: dict[str, Any]) -> Any:
        msg_id = data.get("id")
        if (
            "jsonrpc" in data
            and "method" in data
            and "id" in data
            and (isinstance(msg_id, bool) or not isinstance(msg_id, int | str | None))
        ):
            invalid = JsonRpcInvalidRequest("a request id must be a number or a string")
            return _Rejected(None, str(data.get("method")), invalid)
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            msg_id, method = data.get("id"), data.get("method")
            if isinstance(msg_id, int | str) and isinstance(method, str):
                error = JsonRpcInvalidParams(f"{method}: the params do not match the LSP specification")
                if not isinstance(exc, JsonRpcInvalidParams):
                    error = JsonRpcInvalidParams(f"{method}: the params could not be decoded")
                return _Rejected(msg_id, method, error)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Rejected):
            log.warning("rejected %s request %s: %s", message.method, message.id, message.error.message)
            if message.id is None:
                self.null_id_error(message.error.code, message.error.message)
            else:
                self._send_response(message.id, None, message.error.to_response_error())
            return
        method = getattr(message, "method", None)
        if self._shutdown and method is not None and method != EXIT and hasattr(message, "id"):
            error = JsonRpcInvalidRequest(f"{method}: the server is shutting down (only `exit` is accepted)")
            self._send_response(message.id, None, error.to_response_error())
            return
        super().handle_message(message)

    def parse_error(self, exc: Exception) -> None:
        """A body that is not JSON: `-32700` with a null id (JSON-RPC 2.0 §5.1)."""
        self.null_id_error(-32700, f"Parse error: {exc}")

    def null_id_error(self, code: int, text: str) -> None:
        # Sent as a plain dict: pygls' converter drops a None id, and JSON-RPC wants `"id": null`.
        self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": text}})

    def _send_response(
        self, msg_id: Any, result: Any | None = None, error: ResponseError | None = None
    ) -> None:
        if error is not None and isinstance(error.data, dict) and "traceback" in error.data:
            log.error(
                "internal error answering %s: %s\n%s", msg_id, error.message, "".join(error.data["traceback"])
            )
            error = ResponseError(code=error.code, message=error.message)
        super()._send_response(msg_id, result, error)


class SessionProtocol(FlowProtocol):
    """A session of the daemon (flowd/server/daemon.py): `exit` ends this session, not the process,
    and the writer is told which messages are notifications (those may be dropped for a client
    that fell behind; answers never are)."""

    @lsp_method(EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        if (user_handler := self.fm.features.get(EXIT)) is not None:
            yield user_handler, args, None
        stop = getattr(self._server, "_stop_event", None)
        if stop is not None:
            stop.set()
        if self.writer is not None:
            self.writer.close()

    def _send_data(self, data: Any) -> None:
        writer = self.writer
        if writer is not None and hasattr(writer, "notification"):
            method = data.get("method") if isinstance(data, dict) else getattr(data, "method", None)
            has_id = "id" in data if isinstance(data, dict) else hasattr(data, "id")
            writer.notification = method is not None and not has_id
        super()._send_data(data)
