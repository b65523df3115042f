"""JSON-RPC's own error cases, on the wire: a raw framed client against a real `flowd serve`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.fuzz_lsp import Server, frame, message, workspace


def test_parse_errors_bad_ids_and_requests_after_shutdown_get_their_errors(tmp_path: Path) -> None:
    repo = workspace(tmp_path)
    server = Server(repo, {**os.environ, "FLOWD_SCRIPT_STATE": str(tmp_path / "state")})
    seen: dict[Any, dict[str, Any]] = {}
    try:
        server.send(
            message(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"processId": None, "rootUri": repo.as_uri(), "capabilities": {}},
                }
            )
        )
        assert server.wait_for(1, 60, seen) is not None
        server.send(message({"jsonrpc": "2.0", "method": "initialized", "params": {}}))

        server.send(frame(b'{"jsonrpc": "2.0", "id": 2, "method": '))  # not JSON
        parse = server.wait_for("null", 20, seen)
        assert parse is not None and parse["error"]["code"] == -32700 and parse["id"] is None
        del seen["null"]

        server.send(message({"jsonrpc": "2.0", "id": {"x": 1}, "method": "flow/status", "params": {}}))
        bad_id = server.wait_for("null", 20, seen)
        assert bad_id is not None and bad_id["error"]["code"] == -32600 and bad_id["id"] is None

        server.send(message({"jsonrpc": "2.0", "id": 3, "method": "flow/status", "params": {}}))
        status = server.wait_for(3, 20, seen)
        assert status is not None and "result" in status  # still serving
        assert "traceback" not in json.dumps(seen)

        server.send(message({"jsonrpc": "2.0", "id": 4, "method": "shutdown"}))
        assert server.wait_for(4, 20, seen) is not None
        server.send(message({"jsonrpc": "2.0", "id": 5, "method": "flow/status", "params": {}}))
        late = server.wait_for(5, 20, seen)
        assert late is not None and late["error"]["code"] == -32600
        assert "shutting down" in late["error"]["message"]
        server.send(message({"jsonrpc": "2.0", "method": "exit"}))
        assert server.process.wait(timeout=30) == 0
    finally:
        server.stop()
