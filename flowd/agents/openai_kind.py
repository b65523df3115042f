"""`kind = "openai"`: any OpenAI-compatible `/v1/chat/completions` server, for text roles.

The request streams (SSE) with `stream_options.include_usage`, so the last chunk carries the
turn's usage. HTTP runs on the stdlib `http.client` in a worker thread; cancelling or timing out a
turn closes the socket, which ends the thread's blocking read. A read that waits longer than the
stall timeout is a stall. The conversation is kept per (cwd, role, story, task), so a re-ask after
a reply that did not parse sees the first answer, as it would in an agent's session.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from flowd.agents.base import AgentError, TurnObserver, TurnRequest, TurnResult, TurnUsage
from flowd.agents.faults import classify
from flowd.store.config import TEXT_ROLES, ExecutorSpec

_MAX_ERROR_BODY = 64 * 1024


# --- pure parts ----------------------------------------------------------------------------------


def sse_payloads(lines: Iterable[str]) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream, one per event, `[DONE]` included."""
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue  # a comment (keep-alive)
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def usage_from(raw: Any, model: str | None) -> TurnUsage | None:
    """An OpenAI `usage` object as a TurnUsage; `prompt_tokens` already counts cached tokens."""
    if not isinstance(raw, dict):
        return None
    prompt = _int(raw.get("prompt_tokens"))
    completion = _int(raw.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    cost = raw.get("cost")  # some gateways (OpenRouter, LiteLLM) report the dollars too
    return TurnUsage(
        input=prompt or 0,
        output=completion or 0,
        cached_read=cached,
        cost_usd=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
        model=model,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class Folded:
    """What a stream of chunks adds up to."""

    text: str = ""
    usage: TurnUsage | None = None
    model: str | None = None
    finish_reason: str | None = None
    error: str | None = None
    parts: list[str] = field(default_factory=list)


def fold_chunk(state: Folded, chunk: Any) -> str | None:
    """Add one parsed chunk to `state`; returns the text delta it carried, if any."""
    if not isinstance(chunk, dict):
        return None
    if "error" in chunk:
        state.error = _error_text(chunk)
        return None
    if isinstance(chunk.get("model"), str):
        state.model = chunk["model"]
    if chunk.get("usage") is not None:
        state.usage = usage_from(chunk["usage"], state.model)
    delta_text: str | None = None
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or choice.get("message") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(content, str) and content:
            state.parts.append(content)
            delta_text = content
        if choice.get("finish_reason"):
            state.finish_reason = str(choice["finish_reason"])
    state.text = "".join(state.parts)
    return delta_text


def _error_text(body: Any) -> str:
    """The readable part of an OpenAI-style error body (`{"error": {"message", "type", "code"}}`)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            bits = [str(error.get(k)) for k in ("message", "type", "code") if error.get(k)]
            if bits:
                return " · ".join(dict.fromkeys(bits))
        elif isinstance(error, str):
            return error
    return json.dumps(body)[:500]


def classify_http(
    status: int, body: str, *, retry_after: str | None = None, url: str = "", now: datetime | None = None
) -> AgentError:
    """An HTTP error response as a typed failure."""
    now = now or datetime.now(UTC)
    try:
        detail = _error_text(json.loads(body))
    except ValueError:
        detail = " ".join(body.split())[:500] or http.client.responses.get(status, "")
    message = f"HTTP {status} from {url}: {detail}" if url else f"HTTP {status}: {detail}"
    lowered = detail.lower()
    if status == 429 or "insufficient_quota" in lowered:
        if "insufficient_quota" in lowered or "exceeded your current quota" in lowered:
            return AgentError("usage_limit", message)
        wait = _seconds(retry_after)
        reset = now + timedelta(seconds=wait) if wait is not None else None
        return AgentError("rate_limit", message, reset_at=reset)
    if status in (401, 403):
        return AgentError("auth", message)
    if status == 404:
        # An unknown model, or a baseUrl that is no chat-completions endpoint: neither heals in a run.
        return AgentError("auth", message + " (check the roster's baseUrl and model)")
    if status in (502, 503, 504):
        return AgentError("unavailable", message)
    kind, reset = classify(detail, now=now)
    return AgentError(kind if kind != "crash" else "error", message, reset_at=reset)


def _seconds(text: str | None) -> float | None:
    """A `Retry-After` header in seconds (the HTTP-date form is rare on these servers: ignored)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


# --- the executor --------------------------------------------------------------------------------


class OpenAIExecutor:
    """One clone's connection to an OpenAI-compatible server."""

    def __init__(self, spec: ExecutorSpec, *, clone: int = 1, log_dir: Path | None = None) -> None:
        if not spec.base_url or not spec.model:
            raise ValueError(f"executor {spec.id}: kind 'openai' needs baseUrl and model")
        self.spec = spec
        self.clone = clone
        self._url = spec.base_url.rstrip("/") + "/chat/completions"
        self._api_key = spec.resolved_env.get("OPENAI_API_KEY")
        self._history: dict[tuple[str, ...], list[dict[str, str]]] = {}
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._aborted = threading.Event()  # set by cancel/timeout, seen by a thread not yet connected

    async def run_turn(self, request: TurnRequest, observe: TurnObserver | None = None) -> TurnResult:
        if request.role not in TEXT_ROLES:
            raise AgentError(
                "error",
                f"executor {self.spec.id} (kind openai) serves planner, reviewer and judge, not {request.role}",
            )
        key = (str(request.cwd), request.role, request.meta.story or "", request.meta.task or "")
        messages = [*self._history.get(key, []), {"role": "user", "content": request.prompt}]
        body = {
            "model": self.spec.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        loop = asyncio.get_running_loop()

        def on_delta(text: str) -> None:
            if observe is not None:
                loop.call_soon_threadsafe(observe, text)

        self._aborted.clear()
        work = asyncio.to_thread(self._exchange, json.dumps(body).encode(), on_delta, request.stall_timeout_s)
        try:
            folded = await asyncio.wait_for(work, timeout=request.turn_timeout_s)
        except TimeoutError:
            self._abort()
            raise AgentError("timeout", f"no answer from {self._url} within {request.turn_timeout_s:g}s")
        except asyncio.CancelledError:
            self._abort()
            raise
        self._history[key] = [*messages, {"role": "assistant", "content": folded.text}]
        return TurnResult(
            text=folded.text,
            usage=folded.usage,
            stop_reason="max_tokens" if folded.finish_reason == "length" else "end_turn",
            model=folded.model or self.spec.model,
        )

    def _exchange(self, body: bytes, on_delta: Callable[[str], None], stall_s: float) -> Folded:
        """The blocking HTTP exchange (runs in a worker thread)."""
        parts = urlsplit(self._url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, timeout=stall_s, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=stall_s)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            try:
                conn.connect()
                with self._lock:
                    if self._aborted.is_set():
                        raise AgentError("cancelled", "the turn was cancelled")
                    # The raw socket, kept apart: http.client drops `conn.sock` once a response
                    # that closes the connection owns it, and `_abort` must still reach it.
                    self._sock = conn.sock
                conn.request("POST", path or "/", body=body, headers=headers)
                response = conn.getresponse()
            except TimeoutError as exc:
                raise AgentError("stall", f"{self._url} did not answer within {stall_s:g}s") from exc
            except OSError as exc:
                raise AgentError("unavailable", f"cannot reach {self._url}: {exc}") from exc
            try:
                if response.status >= 400:
                    text = response.read(_MAX_ERROR_BODY).decode("utf-8", "replace")
                    raise classify_http(
                        response.status, text, retry_after=response.getheader("Retry-After"), url=self._url
                    )
                return self._read(response, on_delta, stall_s)
            except TimeoutError as exc:
                raise AgentError("stall", f"{self._url} sent nothing for {stall_s:g}s") from exc
            except (OSError, http.client.HTTPException) as exc:
                raise AgentError("unavailable", f"the stream from {self._url} broke: {exc}") from exc
            finally:
                response.close()
        finally:
            with self._lock:
                self._sock = None
            conn.close()

    def _read(
        self, response: http.client.HTTPResponse, on_delta: Callable[[str], None], stall_s: float
    ) -> Folded:
        folded = Folded()
        kind = response.getheader("Content-Type", "")
        if "text/event-stream" not in kind:
            # A server that ignores `stream` answers with one JSON body.
            raw = response.read()
            try:
                fold_chunk(folded, json.loads(raw))
            except ValueError as exc:
                raise AgentError("error", f"{self._url} answered with no JSON ({raw[:200]!r})") from exc
        else:
            lines = (line.decode("utf-8", "replace") for line in iter(response.readline, b""))
            for payload in sse_payloads(lines):
                if payload.strip() == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue  # a stray non-JSON event carries nothing for us
                delta = fold_chunk(folded, chunk)
                if delta:
                    on_delta(delta)
        if folded.error is not None:
            kind_, reset = classify(folded.error)
            raise AgentError(kind_ if kind_ != "crash" else "error", folded.error, reset_at=reset)
        return folded

    def _abort(self) -> None:
        """Close the socket under the worker thread, so its blocking read ends now."""
        with self._lock:
            self._aborted.set()
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    async def cancel(self) -> None:
        self._abort()

    async def close(self) -> None:
        self._abort()
        self._history.clear()
