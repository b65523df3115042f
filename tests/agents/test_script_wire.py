"""The scripted agent on the raw wire: it speaks ACP itself (no SDK), so every message it sends is
checked here against the SDK's own schema models, and the JSON-RPC details the SDK used to take
care of (request ids, error objects, unknown methods, bad params, end of input) are pinned down."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from acp.schema import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestPermissionRequest,
    SessionNotification,
)

from flowd.agents.factory import script_command

Json = dict[str, Any]
RULES = [
    {
        "when": {"story": "a"},
        "writes": {"x.txt": "hi\n", "../out.txt": "no"},
        "run": ["echo $FLOWD_PORT > port.txt"],
        "reply": "Did it",
        "usage": {"input": 100, "output": 20, "cachedRead": 30, "cacheWrite": 10, "costUsd": 0.25},
    },
    {"when": {"story": "rl"}, "fail": "rate_limit"},
    {"when": {"story": "slow"}, "delayMs": 60_000},
]


class Agent:
    """The agent process and the messages it sent, read by a thread into a queue."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.sent: queue.Queue[Json] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.sent.put(json.loads(line))

    def send(self, message: Json) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(
        self, rid: Any, method: str, params: Any, allow: Callable[[Json], bool] = lambda _: True
    ) -> list[Json]:
        """Send a request; answer permission requests with `allow`; every message up to the answer."""
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        seen: list[Json] = []
        while True:
            message = self.sent.get(timeout=30)
            seen.append(message)
            if message.get("method") == "session/request_permission":
                option = "allow" if allow(message) else "reject"
                outcome = {"outcome": "selected", "optionId": option}
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
            elif message.get("id") == rid and "method" not in message:
                return seen


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    script = tmp_path / "wire.script.json"
    script.write_text(json.dumps({"model": "m1", "rules": RULES}))
    env = {**os.environ, "FLOWD_SCRIPT_STATE": str(tmp_path / "state")}
    proc = subprocess.Popen(
        script_command(script),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        yield Agent(proc)
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def open_session(agent: Agent, cwd: Path) -> str:
    (answer,) = agent.call(0, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert answer == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": "flowd-script", "title": "flowd scripted agent", "version": "1"},
        },
    }
    InitializeResponse.model_validate(answer["result"])
    (answer,) = agent.call(1, "session/new", {"cwd": str(cwd), "mcpServers": []})
    return NewSessionResponse.model_validate(answer["result"]).session_id


def prompt_params(session_id: str, story: str) -> Json:
    meta = {
        "flowd": {"role": "coder", "runId": "r1", "story": story, "task": "T1", "env": {"FLOWD_PORT": "4242"}}
    }
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}], "_meta": meta}


def test_a_turn_sends_what_the_sdk_sent_and_the_sdk_reads_it(agent: Agent, tmp_path: Path) -> None:
    cwd = tmp_path / "wt"
    cwd.mkdir()
    session_id = open_session(agent, cwd)
    messages = agent.call(
        2, "session/prompt", prompt_params(session_id, "a"), allow=lambda m: "../" not in str(m)
    )
    *updates, answer = messages
    for message in updates:
        params = message["params"]
        if message["method"] == "session/update":
            SessionNotification.model_validate(params)
        else:
            RequestPermissionRequest.model_validate(params)
    kinds = [m["params"].get("update", {}).get("sessionUpdate", m["method"]) for m in updates]
    assert kinds == [
        "agent_thought_chunk",
        *["tool_call", "session/request_permission", "tool_call_update"] * 3,
        "agent_message_chunk",
        "agent_message_chunk",
        "usage_update",
    ]
    assert [m["id"] for m in updates if "id" in m] == [0, 1, 2]  # the agent's own requests count from 0
    assert updates[1]["params"]["update"] == {
        "toolCallId": "call_1",
        "title": "Write x.txt",
        "kind": "edit",
        "status": "pending",
        "locations": [{"path": str(cwd / "x.txt")}],
        "rawInput": {"path": str(cwd / "x.txt")},
        "sessionUpdate": "tool_call",
    }
    assert updates[6]["params"]["update"] == {
        "toolCallId": "call_2",
        "status": "failed",
        "sessionUpdate": "tool_call_update",
    }
    text = "".join(m["params"]["update"]["content"]["text"] for m in updates[-3:-1])
    assert text == "Did it\n(permission refused: Write ../out.txt)"
    assert updates[-1]["params"]["update"]["cost"] == {"amount": 0.25, "currency": "USD"}
    assert answer == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "stopReason": "end_turn",
            "usage": {
                "totalTokens": 120,
                "inputTokens": 60,
                "outputTokens": 20,
                "cachedReadTokens": 30,
                "cachedWriteTokens": 10,
            },
            "_meta": {"model": "m1"},
        },
    }
    PromptResponse.model_validate(answer["result"])
    assert (cwd / "x.txt").read_text() == "hi\n" and (cwd / "port.txt").read_text().strip() == "4242"
    assert not (tmp_path / "out.txt").exists()


def test_errors_are_json_rpc_error_objects(agent: Agent, tmp_path: Path) -> None:
    session_id = open_session(agent, tmp_path)
    *_, failed = agent.call(2, "session/prompt", prompt_params(session_id, "rl"))
    assert failed["error"] == {
        "code": -32603,
        "message": "Internal error",
        "data": {"details": "API Error: 429 rate limit exceeded, please retry shortly"},
    }
    (unknown,) = agent.call(3, "session/prompt", {"sessionId": "nope", "prompt": []})
    assert unknown["error"] == {
        "code": -32602,
        "message": "Invalid params",
        "data": {"sessionId": "nope", "reason": "unknown session"},
    }
    (missing,) = agent.call("x", "session/new", {"cwd": str(tmp_path)})
    assert missing["id"] == "x" and missing["error"]["code"] == -32602
    assert missing["error"]["data"]["errors"][0]["loc"] == ["mcpServers"]
    for method in ("session/load", "authenticate", "_ext/thing", "no/such"):
        (answer,) = agent.call(4, method, {})
        assert answer["error"] == {"code": -32601, "message": "Method not found", "data": {"method": method}}


def test_cancel_ends_a_delay_and_end_of_input_ends_the_process(agent: Agent, tmp_path: Path) -> None:
    session_id = open_session(agent, tmp_path)
    agent.send(
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt_params(session_id, "slow")}
    )
    agent.send({"jsonrpc": "2.0", "method": "not/a/notification", "params": {}})
    (answer,) = agent.call(3, "session/new", {"cwd": str(tmp_path), "mcpServers": []})  # served meanwhile
    assert answer["result"]["sessionId"] != session_id
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
    assert agent.sent.get(timeout=30) == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "cancelled"}}
    assert agent.proc.stdin is not None
    agent.proc.stdin.close()
    assert agent.proc.wait(timeout=30) == 0
