"""The openai kind against a real HTTP server on 127.0.0.1 (the model boundary), speaking SSE."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from flowd.agents.base import AgentError, FlowdMeta, TurnRequest
from flowd.agents.openai_kind import (
    Folded,
    OpenAIExecutor,
    classify_http,
    fold_chunk,
    sse_payloads,
    usage_from,
)
from flowd.store.config import ExecutorSpec

Reply = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Server:
    url: str
    replies: list[Reply]
    seen: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="", replies=[])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            state.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
            state.arrived.set()
            reply = state.replies.pop(0)
            reply(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def sse(chunks: list[dict[str, Any] | str], *, chunked: bool = True) -> Reply:
    """A streaming reply: each chunk as one `data:` event, then `[DONE]`."""

    def reply(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        if chunked:
            handler.send_header("Transfer-Encoding", "chunked")
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        events = [f": keep-alive\n\ndata: {json.dumps(c) if isinstance(c, dict) else c}\n\n" for c in chunks]
        for text in [*events, "data: [DONE]\n\n"]:
            data = text.encode()
            if chunked:
                handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            else:
                handler.wfile.write(data)
            handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")
        handler.close_connection = True

    return reply


def error(status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)
        handler.close_connection = True

    return reply


def silent(state: Server) -> Reply:
    """Headers, then nothing until the test ends."""

    def reply(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        state.release.wait(timeout=60)
        handler.close_connection = True

    return reply


def chunk(
    content: str | None = None, *, usage: dict[str, Any] | None = None, finish: str | None = None
) -> dict[str, Any]:
    choices = (
        []
        if content is None and finish is None
        else [{"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}]
    )
    out: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "qwen2.5-coder-7b",
        "choices": choices,
    }
    if usage is not None:
        out["usage"] = usage
    return out


USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 34,
    "total_tokens": 1234,
    "prompt_tokens_details": {"cached_tokens": 1024},
}


def spec(url: str, key: str | None = "sk-test") -> ExecutorSpec:
    s = ExecutorSpec(
        id="local",
        kind="openai",
        base_url=url,
        model="qwen2.5-coder-7b",
        roles=["planner", "reviewer", "judge"],
    )
    if key is not None:
        s._resolved_env = {"OPENAI_API_KEY": key}
    return s


def turn(
    role: str = "reviewer", prompt: str = "Review this.", *, stall: float = 30.0, timeout: float = 60.0
) -> TurnRequest:
    return TurnRequest(
        role=role,
        prompt=prompt,
        cwd=Path("/tmp/work"),
        meta=FlowdMeta(role=role, run_id="r1", epic_id="e1", story="api"),
        turn_timeout_s=timeout,
        stall_timeout_s=stall,
    )


async def test_streams_text_and_usage_with_cached_tokens(server: Server) -> None:
    server.replies.append(
        sse([chunk('{"issues": []'), chunk(', "summary": "ok"}'), chunk(finish="stop"), chunk(usage=USAGE)])
    )
    seen: list[object] = []
    executor = OpenAIExecutor(spec(server.url))
    result = await executor.run_turn(turn(), observe=seen.append)
    assert result.text == '{"issues": [], "summary": "ok"}'
    assert seen == ['{"issues": []', ', "summary": "ok"}']
    assert result.usage is not None
    assert (result.usage.input, result.usage.output, result.usage.cached_read) == (1200, 34, 1024)
    assert result.usage.model == "qwen2.5-coder-7b" and result.model == "qwen2.5-coder-7b"
    [request] = server.seen
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"]["stream"] is True and request["body"]["stream_options"] == {"include_usage": True}
    assert request["body"]["model"] == "qwen2.5-coder-7b"
    assert request["body"]["messages"] == [{"role": "user", "content": "Review this."}]
    await executor.close()


async def test_a_re_ask_continues_the_conversation_and_no_key_sends_no_header(server: Server) -> None:
    server.replies += [sse([chunk("not json")], chunked=False), sse([chunk("{}"), chunk(usage=USAGE)])]
    executor = OpenAIExecutor(spec(server.url, key=None))
    first = await executor.run_turn(turn(prompt="Plan it."))
    assert first.text == "not json" and first.usage is None  # no usage chunk: the caller estimates
    await executor.run_turn(turn(prompt="That did not parse: reply with JSON."))
    assert "Authorization" not in server.seen[0]["headers"]
    assert server.seen[1]["body"]["messages"] == [
        {"role": "user", "content": "Plan it."},
        {"role": "assistant", "content": "not json"},
        {"role": "user", "content": "That did not parse: reply with JSON."},
    ]


async def test_a_server_that_ignores_stream_answers_one_json_body(server: Server) -> None:
    body = {
        "model": "m1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}
        ],
        "usage": USAGE,
    }
    server.replies.append(error(200, body))
    result = await OpenAIExecutor(spec(server.url)).run_turn(turn())
    assert result.text == "hello" and result.usage is not None and result.usage.input == 1200


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (
            429,
            {
                "error": {
                    "message": "Rate limit reached for requests",
                    "type": "requests",
                    "code": "rate_limit_exceeded",
                }
            },
            "rate_limit",
        ),
        (
            429,
            {
                "error": {
                    "message": "You exceeded your current quota",
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                }
            },
            "usage_limit",
        ),
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            "auth",
        ),
        (403, "forbidden", "auth"),
        (
            404,
            {
                "error": {
                    "message": "The model `gpt-9` does not exist",
                    "type": "invalid_request_error",
                    "code": "model_not_found",
                }
            },
            "auth",
        ),
        (503, {"error": {"message": "Loading model"}}, "unavailable"),
        (400, {"error": {"message": "bad request: messages is empty"}}, "error"),
    ],
)
async def test_http_errors_are_classified(
    server: Server, status: int, body: dict[str, Any] | str, kind: str
) -> None:
    server.replies.append(error(status, body, {"Retry-After": "7"}))
    with pytest.raises(AgentError) as caught:
        await OpenAIExecutor(spec(server.url)).run_turn(turn())
    assert caught.value.kind == kind
    assert f"HTTP {status}" in caught.value.message and server.url in caught.value.message


async def test_an_error_inside_the_stream_is_classified(server: Server) -> None:
    server.replies.append(
        sse([chunk("partial"), {"error": {"message": "Rate limit exceeded, retry later", "code": 429}}])
    )
    with pytest.raises(AgentError) as caught:
        await OpenAIExecutor(spec(server.url)).run_turn(turn())
    assert caught.value.kind == "rate_limit"


async def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(AgentError) as caught:
        await OpenAIExecutor(spec(f"http://127.0.0.1:{port}/v1")).run_turn(turn())
    assert caught.value.kind == "unavailable" and "cannot reach" in caught.value.message


async def test_a_silent_stream_is_a_stall_and_a_long_one_a_timeout(server: Server) -> None:
    server.replies.append(silent(server))
    with pytest.raises(AgentError) as caught:
        await OpenAIExecutor(spec(server.url)).run_turn(turn(stall=0.3))
    assert caught.value.kind == "stall"
    server.replies.append(silent(server))
    with pytest.raises(AgentError) as caught:
        await OpenAIExecutor(spec(server.url)).run_turn(turn(stall=30, timeout=0.3))
    assert caught.value.kind == "timeout"


async def test_cancelling_a_turn_aborts_it_and_the_executor_serves_on(server: Server) -> None:
    server.replies += [silent(server), sse([chunk("again")])]
    executor = OpenAIExecutor(spec(server.url))
    task = asyncio.create_task(executor.run_turn(turn()))
    assert await asyncio.to_thread(server.arrived.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert executor._aborted.is_set()
    result = await executor.run_turn(turn(prompt="next"))
    assert result.text == "again"


async def test_coder_is_not_a_text_role() -> None:
    with pytest.raises(AgentError, match="not coder"):
        await OpenAIExecutor(spec("http://127.0.0.1:9/v1")).run_turn(turn(role="coder"))


def test_sse_parsing_joins_multiline_data_and_skips_comments() -> None:
    lines = [": hi\n", "event: message\n", 'data: {"a":\n', "data: 1}\n", "\n", "data:[DONE]\n", "\n"]
    assert list(sse_payloads(lines)) == ['{"a":\n1}', "[DONE]"]


def test_usage_parsing() -> None:
    assert usage_from({"prompt_tokens": 10, "completion_tokens": 2}, None) is not None
    usage = usage_from({"prompt_tokens": 10, "completion_tokens": 2, "cost": 0.001}, "m")
    assert usage is not None and (usage.input, usage.output, usage.cached_read, usage.cost_usd) == (
        10,
        2,
        None,
        0.001,
    )
    assert usage_from({}, None) is None and usage_from(None, None) is None
    state = Folded()
    fold_chunk(state, {"choices": [{"index": 1, "delta": {"content": "other choice"}}]})
    assert state.text == ""


def test_retry_after_sets_the_reset_of_a_rate_limit() -> None:
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    failure = classify_http(429, '{"error": {"message": "slow down"}}', retry_after="30", now=now)
    assert failure.kind == "rate_limit" and failure.reset_at == now + timedelta(seconds=30)
