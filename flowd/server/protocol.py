"""The JSON-RPC protocol with two repairs over pygls' defaults.

1. `flow/*` requests keep their params as plain JSON (pygls would turn unknown methods' params
   into namedtuples, mangling keys); handlers validate them with pydantic (`params.py`).
2. A request whose params do not fit the LSP type (pygls raises inside its reader loop and never
   answers, leaving the client waiting) is answered with -32602 naming the method.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)

FLOW_REQUESTS = frozenset({"flow/status", "flow/costReport", "flow/perimeter"})


@attrs.define
class RawRequest:
    id: int | str
    method: str
    params: Any = None
    jsonrpc: str = "2.0"


@attrs.define
class _Rejected:
    """A request that could not be decoded: answered with `error`, never dispatched."""

    id: int | str
    method: str
    error: JsonRpcException
    jsonrpc: str = "2.0"


class FlowProtocol(LanguageServerProtocol):
    def get_message_type(self, method: str) -> type[Any] | None:  # type: ignore[override]
        if method in FLOW_REQUESTS:
            return RawRequest
        return super().get_message_type(method)

    def structure_message(self, data: dict[str, Any]) -> Any:
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
            self._send_response(message.id, None, message.error.to_response_error())
            return
        super().handle_message(message)
