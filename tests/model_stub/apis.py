"""The four wire formats the stub speaks: requests → `Conversation`, replies → SSE event lists.

Shapes follow the services' streaming formats: Anthropic Messages (`message_start` …
`message_stop`), OpenAI Responses (`response.created` … `response.completed`), Chat Completions
(`chat.completion.chunk`s, usage in the last when `stream_options.include_usage`), and Gemini
`streamGenerateContent?alt=sse` (`GenerateContentResponse` chunks, `usageMetadata` in the last).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from tests.model_stub.brain import Conversation, Reply


@dataclass
class Served:
    """Tokens of one answered request, the way flowd counts them (`input` includes the cache)."""

    input: int
    output: int
    cache_read: int
    cache_write: int

    @property
    def total(self) -> int:
        return self.input + self.output


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def _texts(content: Any) -> tuple[str, bool]:
    """(text of a message's content, whether it carries a tool result)."""
    if isinstance(content, str):
        return content, False
    text, tool = [], False
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
            text.append(block["text"])
        elif kind in ("tool_result", "function_call_output", "custom_tool_call_output"):
            tool = True
    return "\n".join(text), tool


# --- Anthropic Messages ------------------------------------------------------------------------


def anthropic_conversation(body: dict[str, Any]) -> Conversation:
    last_text, ends_tool, every = "", False, []
    for message in body.get("messages") or []:
        if message.get("role") != "user":
            continue
        text, tool = _texts(message.get("content"))
        ends_tool = tool
        if text.strip() and not tool:
            last_text = text
        every.append(text)
    tools = {t.get("name", ""): "function" for t in body.get("tools") or [] if isinstance(t, dict)}
    return Conversation(
        "anthropic", str(body.get("model", "")), last_text, ends_tool, tools, "\n".join(every)
    )


def anthropic_events(reply: Reply, model: str, served: Served) -> list[bytes]:
    mid = f"msg_{uuid.uuid4().hex[:20]}"
    fresh = served.input - served.cache_read - served.cache_write
    start_usage = {
        "input_tokens": fresh,
        "cache_creation_input_tokens": served.cache_write,
        "cache_read_input_tokens": served.cache_read,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": start_usage}  # fmt: skip
    out = [_sse("message_start", {"type": "message_start", "message": message})]
    index = 0
    if reply.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}}))  # fmt: skip
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "text_delta", "text": reply.text}}))  # fmt: skip
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if reply.tool is not None:
        block = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:20]}",
            "name": reply.tool.name,
            "input": {},
        }
        out.append(
            _sse(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.tool.args)}
        out.append(
            _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = "tool_use" if reply.tool is not None else "end_turn"
    final_usage = {**start_usage, "output_tokens": served.output}
    out.append(_sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                      "stop_sequence": None}, "usage": final_usage}))  # fmt: skip
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def anthropic_message(reply: Reply, model: str, served: Served) -> dict[str, Any]:
    """The non-streaming answer (`"stream": false`), as claude's model check asks for."""
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    if reply.tool is not None:
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": reply.tool.name,
                        "input": reply.tool.args})  # fmt: skip
    return {
        "id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": "tool_use" if reply.tool else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": served.input - served.cache_read - served.cache_write,
                  "cache_creation_input_tokens": served.cache_write,
                  "cache_read_input_tokens": served.cache_read, "output_tokens": served.output},
    }  # fmt: skip


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kinds = {401: "authentication_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
    return {"type": "error", "error": {"type": kinds.get(status, "api_error"), "message": message}}


# --- OpenAI Responses --------------------------------------------------------------------------


def responses_conversation(body: dict[str, Any]) -> Conversation:
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    last_text, ends_tool, every = "", False, []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind in ("function_call_output", "custom_tool_call_output"):
            ends_tool = True
        elif kind == "message" and item.get("role") == "user":
            text, _ = _texts(item.get("content"))
            every.append(text)
            if text.strip() and not text.lstrip().startswith("<environment_context>"):
                last_text, ends_tool = text, False
        elif kind in ("function_call", "custom_tool_call", "message"):
            ends_tool = False
    tools: dict[str, str] = {}
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            tools[tool["name"]] = "custom" if tool.get("type") == "custom" else "function"
    return Conversation(
        "responses", str(body.get("model", "")), last_text, ends_tool, tools, "\n".join(every)
    )


def responses_events(reply: Reply, model: str, served: Served) -> list[bytes]:
    rid = f"resp_{uuid.uuid4().hex[:24]}"
    base = {
        "id": rid,
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    out = [_sse("response.created", {"type": "response.created", "response": base})]
    output: list[dict[str, Any]] = []
    item: dict[str, Any]
    if reply.text:
        item = {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}  # fmt: skip
        out.append(_sse("response.output_item.added", {"type": "response.output_item.added", "output_index": len(output),
                        "item": {**item, "content": [], "status": "in_progress"}}))  # fmt: skip
        out.append(_sse("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": len(output), "content_index": 0, "delta": reply.text}))  # fmt: skip
        out.append(_sse("response.output_item.done", {"type": "response.output_item.done",
                        "output_index": len(output), "item": item}))  # fmt: skip
        output.append(item)
    if reply.tool is not None:
        call_id = f"call_{uuid.uuid4().hex[:20]}"
        if reply.tool.kind == "custom":
            item = {"id": f"ctc_{uuid.uuid4().hex[:20]}", "type": "custom_tool_call", "status": "completed",
                    "call_id": call_id, "name": reply.tool.name, "input": reply.tool.args}  # fmt: skip
        else:
            item = {"id": f"fc_{uuid.uuid4().hex[:20]}", "type": "function_call", "status": "completed",
                    "call_id": call_id, "name": reply.tool.name, "arguments": json.dumps(reply.tool.args)}  # fmt: skip
        out.append(_sse("response.output_item.added", {"type": "response.output_item.added",
                        "output_index": len(output), "item": item}))  # fmt: skip
        out.append(_sse("response.output_item.done", {"type": "response.output_item.done",
                        "output_index": len(output), "item": item}))  # fmt: skip
        output.append(item)
    usage = {
        "input_tokens": served.input,
        "input_tokens_details": {"cached_tokens": served.cache_read},
        "output_tokens": served.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": served.total,
    }
    done = {**base, "status": "completed", "output": output, "usage": usage}
    out.append(_sse("response.completed", {"type": "response.completed", "response": done}))
    return out


def openai_error(status: int, message: str) -> dict[str, Any]:
    codes = {401: "invalid_api_key", 429: "rate_limit_exceeded", 500: "server_error", 529: "overloaded"}
    return {"error": {"message": message, "type": codes.get(status, "server_error"), "param": None,
                      "code": codes.get(status, "server_error")}}  # fmt: skip


# --- Chat Completions --------------------------------------------------------------------------


def chat_conversation(body: dict[str, Any]) -> Conversation:
    last_text, ends_tool, every = "", False, []
    for message in body.get("messages") or []:
        role = message.get("role")
        if role == "tool":
            ends_tool = True
        elif role == "user":
            text, _ = _texts(message.get("content"))
            every.append(text)
            last_text, ends_tool = text, False
    tools = {
        str((t.get("function") or {}).get("name", "")): "function"
        for t in body.get("tools") or []
        if isinstance(t, dict)
    }
    return Conversation("chat", str(body.get("model", "")), last_text, ends_tool, tools, "\n".join(every))


def chat_events(reply: Reply, model: str, served: Served) -> list[bytes]:
    cid = f"chatcmpl-{uuid.uuid4().hex[:20]}"

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
        choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model,
                                "choices": choices}  # fmt: skip
        if usage is not None:
            body["usage"] = usage
        return _sse(None, body)

    out = [chunk({"role": "assistant", "content": ""})]
    if reply.text:
        out.append(chunk({"content": reply.text}))
    out.append(chunk({}, "stop"))
    usage = {
        "prompt_tokens": served.input,
        "completion_tokens": served.output,
        "total_tokens": served.total,
        "prompt_tokens_details": {"cached_tokens": served.cache_read},
    }
    out.append(chunk({}, usage=usage))
    out.append(b"data: [DONE]\n\n")
    return out


# --- Gemini ------------------------------------------------------------------------------------


def gemini_conversation(body: dict[str, Any], model: str) -> Conversation:
    last_text, ends_tool, every = "", False, []
    for content in body.get("contents") or []:
        if content.get("role", "user") != "user":
            ends_tool = False
            continue
        parts = content.get("parts") or []
        text = "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
        tool = any(isinstance(p, dict) and "functionResponse" in p for p in parts)
        every.append(text)
        ends_tool = tool
        if text.strip() and not tool:
            last_text = text
    tools: dict[str, str] = {}
    for group in body.get("tools") or []:
        for decl in (group or {}).get("functionDeclarations") or []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                tools[decl["name"]] = "function"
    system = body.get("systemInstruction") or {}
    system_text = " ".join(p.get("text", "") for p in system.get("parts") or [] if isinstance(p, dict))
    return Conversation("gemini", model, last_text, ends_tool, tools, "\n".join([system_text, *every]))


def gemini_events(reply: Reply, model: str, served: Served) -> list[bytes]:
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"text": reply.text})
    if reply.tool is not None:
        parts.append({"functionCall": {"name": reply.tool.name, "args": reply.tool.args}})
    usage = {
        "promptTokenCount": served.input,
        "cachedContentTokenCount": served.cache_read,
        "candidatesTokenCount": served.output,
        "totalTokenCount": served.total,
    }
    body = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": uuid.uuid4().hex[:16],
    }
    return [_sse(None, body)]


def gemini_error(status: int, message: str) -> dict[str, Any]:
    statuses = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 529: "UNAVAILABLE"}
    return {"error": {"code": status, "message": message, "status": statuses.get(status, "INTERNAL")}}
