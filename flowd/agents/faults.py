"""Agent error texts → typed failures (`FailureKind`) and, for quota limits, when they reset.

Real agents say the same things in different words: claude names a wall-clock reset in a zone
(`resets 8:20am (Europe/Rome)`), codex a local wall time (`try again at 3:45 PM`), gemini a
duration (`reset after 1h2m3s`). The roster needs one verdict: exclude for a while (rate limit),
until the reset (usage limit), for the run (auth), or until the engine answers (unavailable).
Order matters: a usage limit mentioning "429" is still a usage limit, and an auth failure beats
everything because retrying it never helps.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flowd.agents.base import FailureKind

_AUTH = (
    "not logged in",
    "please run /login",
    "invalid api key",
    "invalid x-api-key",
    "invalid_api_key",
    "incorrect api key",
    "api key not valid",
    "authentication required",
    "authentication_error",
    "authentication failed",
    "unauthorized",
    "401",
    "oauth token has expired",
    "unknown model",
    "model not found",
    "model_not_found",
    "invalid model",
    "does not exist or you do not have access",
)
_USAGE = (
    "usage limit",
    "session limit",
    "weekly limit",
    "daily limit",
    "monthly limit",
    "out of credits",
    "out of extra usage",
    "credit balance is too low",
    "insufficient_quota",
    "exceeded your current quota",
    "exhausted your capacity",
    "quota",
    "resource_exhausted",
)
_RATE = ("rate limit", "rate_limit", "ratelimit", "429", "too many requests", "overloaded", "529")
_UNAVAILABLE = (
    "connection refused",
    "econnrefused",
    "enotfound",
    "getaddrinfo",
    "could not resolve host",
    "name or service not known",
    "network is unreachable",
    "no route to host",
    "econnreset",
    "connection reset",
    "etimedout",
    "service unavailable",
    "bad gateway",
    "503",
    "502",
    "command not found",
    "no such file or directory",
)
# The model endpoint answered, but not in its API (an HTML page, a stream that is not JSON, a
# stream cut short): a proxy or a wrong base URL, so "not answering" (docs/roster.md).
_GARBLED = (
    "malformed response",  # claude
    "stream disconnected before completion",  # codex
    "error decoding response body",  # codex
    "incomplete json segment",  # gemini
    "unexpected token",
    "is not valid json",
    "invalid json",
)
GARBLED_FIX = (
    "the model endpoint's answer is not its API; check the agent's base URL and any proxy in between"
)

# A gemini-style retry delay at or under this is a rate limit to wait out, above it a spent quota.
_SHORT_RETRY = timedelta(seconds=120)

_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|d|days?|h|hours?|hrs?|m|mins?|minutes?|s|secs?|seconds?)(?![a-z])",
    re.IGNORECASE,
)
_DURATION = re.compile(
    r"(?:reset|resets|retry|try again)\s+(?:after|in)\s+((?:\d+(?:\.\d+)?\s*[a-z]+[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
_WALL = re.compile(
    r"(?:resets?|try again|available again)\s+(?:at\s+|on\s+)?(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\.?"
    r"(?:\s*\(([A-Za-z_]+(?:/[A-Za-z_+\-0-9]+)*)\))?",
    re.IGNORECASE,
)
_ISO = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)")
_EPOCH = re.compile(r"limit[^|\n]*\|\s*(\d{10})\b", re.IGNORECASE)


def classify(
    message: str, *, exit_code: int | None = None, now: datetime | None = None
) -> tuple[FailureKind, datetime | None]:
    """The failure kind an agent's error text means, and the reset time if it names one (UTC).

    `exit_code` is the agent's exit status when the process died: an unrecognised text is then
    a crash (126/127: it could not even start, so the engine is unavailable).
    """
    now = now or datetime.now(UTC)
    message = without_paths(message)
    text = message.lower()
    if _has(text, _AUTH):
        return "auth", None
    reset = reset_time(message, now=now)
    if _has(text, _USAGE):
        if reset is not None and reset - now <= _SHORT_RETRY and _DURATION.search(message):
            return "rate_limit", reset
        return "usage_limit", reset
    if _has(text, _RATE):
        if reset is not None and reset - now > _SHORT_RETRY:
            return "usage_limit", reset
        return "rate_limit", reset
    if exit_code in (126, 127) or _has(text, _UNAVAILABLE) or _garbled(text):
        return "unavailable", None
    if exit_code is not None:
        return "crash", None
    return "error", None


def _garbled(text: str) -> bool:
    # gemini says only "terminated" (node's fetch) when the stream is cut mid-answer.
    return _has(text, _GARBLED) or text.strip().rsplit(": ", 1)[-1] == "terminated"


def worded(message: str) -> str:
    """The agent's error as flowd says it: a garbled answer of the model endpoint leads with the
    fix (the agents' own words name neither the cause nor the setting to check)."""
    if not _garbled(message.lower()):
        return message
    return f"{GARBLED_FIX} ({' '.join(message.split())})"


# A file path (absolute, or ~/…) up to whitespace or a quote; URLs keep theirs (the `/` after
# `:`, `/` or a word character is not a path's start).
_PATH = re.compile(r"(?<![\w:/.~-])~?/[^\s'\"`()\[\]<>,;]+")


def without_paths(message: str) -> str:
    """The message with file paths blanked: a work dir named `…-401-…` is not an HTTP 401."""
    return _PATH.sub("<path>", message)


def reset_time(message: str, *, now: datetime | None = None) -> datetime | None:
    """The reset or retry time a limit message names, in UTC; None when it names none."""
    now = now or datetime.now(UTC)
    match = _EPOCH.search(message)
    if match:
        return datetime.fromtimestamp(int(match.group(1)), UTC)
    match = _DURATION.search(message)
    if match:
        delta = _duration(match.group(1))
        if delta is not None:
            return now + delta
    match = _WALL.search(message)
    if match:
        return _next_wall_time(match, now)
    match = _ISO.search(message)
    if match:
        return _parse_iso(match.group(1))
    return None


def _has(text: str, needles: tuple[str, ...]) -> bool:
    for needle in needles:
        if needle.isdigit():
            # Status codes only as whole numbers: "429" but not "14290 tokens".
            if re.search(rf"(?<!\d){needle}(?!\d)", text):
                return True
        elif needle in text:
            return True
    return False


def _duration(text: str) -> timedelta | None:
    total = 0.0
    found = False
    for amount, unit in _DURATION_PART.findall(text):
        found = True
        value = float(amount)
        unit = unit.lower()
        if unit.startswith("ms") or unit.startswith("milli"):
            total += value / 1000
        elif unit.startswith("d"):
            total += value * 86400
        elif unit.startswith("h"):
            total += value * 3600
        elif unit.startswith("m"):
            total += value * 60
        else:
            total += value
    return timedelta(seconds=total) if found else None


def _next_wall_time(match: re.Match[str], now: datetime) -> datetime:
    hour = int(match.group(1)) % 12
    if match.group(3).lower() == "p":
        hour += 12
    minute = int(match.group(2) or 0)
    zone: tzinfo | None = None
    if match.group(4):
        try:
            zone = ZoneInfo(match.group(4))
        except (ZoneInfoNotFoundError, ValueError):
            zone = None
    if zone is None:
        zone = datetime.now().astimezone().tzinfo or UTC  # the agent speaks the machine's local time
    local_now = now.astimezone(zone)
    candidate = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if candidate <= local_now:
        candidate = candidate + timedelta(days=1)
    return candidate.astimezone(UTC)


def _parse_iso(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
