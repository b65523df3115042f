"""Usage an ACP agent reports, per its convention, as flowd's per-turn `TurnUsage` (docs/trace.md, docs/roster.md).

claude-agent-acp reports per-turn `PromptResponse.usage` with the cache apart from the input;
codex the same shape (for the last model request only); gemini only `_meta.quota`. The dollar
cost (claude only) arrives separately as a cumulative `usage_update`, handled by the executor.
"""

from __future__ import annotations

from typing import Any

from acp.schema import PromptResponse

from flowd.agents.base import TurnUsage
from flowd.events.model import Usage


def capture_usage(response: PromptResponse) -> TurnUsage | None:
    """Per-turn tokens: `_meta.quota.model_usage` when the agent sends it (every request of the
    turn, side requests included), else `PromptResponse.usage`, else `_meta.quota.token_count`."""
    meta = response.field_meta or {}
    per_model = model_usages(meta)
    if per_model:
        return per_model[0]
    usage = response.usage
    if usage is not None:
        read = usage.cached_read_tokens or 0
        write = usage.cached_write_tokens or 0
        total_over_all = usage.input_tokens + usage.output_tokens + read + write
        # claude (and codex) count input without the cache and put the cache in total_tokens;
        # an agent whose input already includes the cache reports total = input + output.
        apart = (read or write) and usage.total_tokens >= total_over_all
        return TurnUsage(
            input=usage.input_tokens + (read + write if apart else 0),
            output=usage.output_tokens,
            cached_read=usage.cached_read_tokens,
            cache_write=usage.cached_write_tokens,
            model=reported_model(meta),
        )
    quota = meta.get("quota")
    if isinstance(quota, dict) and isinstance(quota.get("token_count"), dict):
        count = quota["token_count"]
        return TurnUsage(
            input=int(count.get("input_tokens") or 0),
            output=int(count.get("output_tokens") or 0),
            model=reported_model(meta),
        )
    return None


def reported_model(meta: dict[str, Any]) -> str | None:
    if isinstance(meta.get("model"), str):
        return str(meta["model"])
    quota = meta.get("quota")
    if isinstance(quota, dict):
        models = quota.get("model_usage")
        if isinstance(models, list) and models and isinstance(models[0], dict):
            name = models[0].get("model")
            return name if isinstance(name, str) else None
    return None


def _count(entry: dict[str, Any], *names: str) -> int:
    for name in names:
        value = entry.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def _from_count(count: dict[str, Any], model: str | None) -> TurnUsage:
    fresh = _count(count, "inputTokens", "input_tokens")
    read = _count(count, "cachedInputTokens", "cachedReadTokens", "cached_input_tokens")
    write = _count(count, "cachedWriteTokens", "cacheWriteTokens", "cached_write_tokens")
    out = _count(count, "outputTokens", "output_tokens")
    total = _count(count, "totalTokens", "total_tokens")
    # claude counts input without the cache (total = input + cache + output); codex and gemini
    # count the cache inside input (total = input + output).
    apart = bool(read or write) and total >= fresh + read + write + out
    return TurnUsage(
        input=fresh + (read + write if apart else 0),
        output=out,
        cached_read=read if (read or "cachedInputTokens" in count) else None,
        cache_write=write if (write or "cachedWriteTokens" in count) else None,
        model=model,
    )


def model_usages(meta: dict[str, Any]) -> list[TurnUsage]:
    """One `TurnUsage` per model of `_meta.quota.model_usage` (largest first); [] when absent.

    claude-agent-acp and codex-acp put every model request of the turn there, including the
    requests the agent makes on its own (a session title, an auto-mode classifier), which
    `PromptResponse.usage` leaves out (docs/roster.md, "Usage").
    """
    quota = meta.get("quota")
    models = quota.get("model_usage") if isinstance(quota, dict) else None
    if not isinstance(models, list):
        return []
    found = [
        _from_count(entry["token_count"], entry.get("model") if isinstance(entry.get("model"), str) else None)
        for entry in models
        if isinstance(entry, dict) and isinstance(entry.get("token_count"), dict)
    ]
    found = [u for u in found if u.input or u.output]
    return sorted(found, key=lambda u: u.input + u.output, reverse=True)


def wire_usage(usage: TurnUsage) -> Usage:
    """An agent's reported usage as the trace records it."""
    return Usage(
        input=usage.input,
        output=usage.output,
        total=usage.input + usage.output,
        cached_read=usage.cached_read,
        cache_write=usage.cache_write,
        cost_usd=usage.cost_usd,
    )
