"""Usage an ACP agent reports, per its convention, as flowd's per-turn `TurnUsage` (contract §4).

claude-agent-acp reports per-turn `PromptResponse.usage` with the cache apart from the input;
codex the same shape (for the last model request only); gemini only `_meta.quota`. The dollar
cost (claude only) arrives separately as a cumulative `usage_update`, handled by the executor.
"""

from __future__ import annotations

from typing import Any

from acp.schema import PromptResponse

from flowd.agents.base import TurnUsage


def capture_usage(response: PromptResponse) -> TurnUsage | None:
    """Per-turn tokens from `PromptResponse.usage`, else gemini's `_meta.quota`; None when neither."""
    meta = response.field_meta or {}
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
