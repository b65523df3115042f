"""Real agents' error texts → failure kinds and reset times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from flowd.agents.faults import classify, reset_time, worded

NOW = datetime(2026, 11, 29, 14, 3, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("API Error: 429 rate limit exceeded, please retry shortly", "rate_limit"),
        (
            '{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests exceeded"}}',
            "rate_limit",
        ),
        ("API Error: 529 Overloaded", "rate_limit"),
        ("Too Many Requests", "rate_limit"),
        ("Claude AI usage limit reached|1764430000", "usage_limit"),
        ("You've hit your session limit · resets 8:20am (Europe/Rome)", "usage_limit"),
        ("You've hit your usage limit. Upgrade to Pro or try again at 3:45 PM.", "usage_limit"),
        (
            "You have exhausted your capacity on this model. Your quota will reset after 2h5m30s.",
            "usage_limit",
        ),
        ("Your credit balance is too low to access the Anthropic API.", "usage_limit"),
        (
            "You exceeded your current quota, please check your plan and billing details. insufficient_quota",
            "usage_limit",
        ),
        ("Authentication required: Not logged in · Please run /login", "auth"),
        ("Invalid API key · Please run /login", "auth"),
        ("401 Unauthorized: invalid x-api-key", "auth"),
        (
            "API Error: 404 model_not_found: The model `gpt-9` does not exist or you do not have access to it.",
            "auth",
        ),
        ("There's an issue with the selected model (claude-9). It may not exist.  unknown model", "auth"),
        (
            "request to https://api.anthropic.com failed, reason: connect ECONNREFUSED 127.0.0.1:443",
            "unavailable",
        ),
        ("getaddrinfo ENOTFOUND api.openai.com", "unavailable"),
        ("stream error: 503 Service Unavailable", "unavailable"),
        ("Internal error: tool exploded", "error"),
        ("used 14290 tokens of context", "error"),
    ],
)
def test_classify_real_messages(message: str, kind: str) -> None:
    assert classify(message, now=NOW)[0] == kind


def test_a_short_gemini_retry_is_a_rate_limit_with_its_time() -> None:
    kind, reset = classify("RESOURCE_EXHAUSTED: quota exceeded. Please reset after 45s.", now=NOW)
    assert kind == "rate_limit"
    assert reset == NOW + timedelta(seconds=45)


def test_a_long_gemini_reset_is_a_usage_limit() -> None:
    kind, reset = classify("You have exhausted your capacity. Your quota will reset after 1h2m3s.", now=NOW)
    assert (kind, reset) == ("usage_limit", NOW + timedelta(hours=1, minutes=2, seconds=3))


def test_reset_times_in_the_zone_the_agent_names() -> None:
    # 14:03 UTC is 15:03 in Rome: 8:20am is tomorrow there.
    rome = reset_time("You've hit your session limit · resets 8:20am (Europe/Rome)", now=NOW)
    assert rome == datetime(2026, 11, 30, 8, 20, tzinfo=ZoneInfo("Europe/Rome")).astimezone(UTC)
    later_today = reset_time("Claude AI usage limit reached · resets 3:15pm (UTC)", now=NOW)
    assert later_today == datetime(2026, 11, 29, 15, 15, tzinfo=UTC)
    assert reset_time("usage limit reached|1764430000") == datetime.fromtimestamp(1764430000, UTC)
    assert reset_time("limit resets at 2026-11-30T09:00:00Z", now=NOW) == datetime(
        2026, 11, 30, 9, tzinfo=UTC
    )
    assert reset_time("please try again in 2 hours 30 minutes", now=NOW) == NOW + timedelta(
        hours=2, minutes=30
    )
    assert reset_time("usage limit reached", now=NOW) is None


def test_a_codex_wall_time_is_read_in_the_local_zone() -> None:
    reset = reset_time("You've hit your usage limit. Try again at 3:45 PM.", now=NOW)
    assert reset is not None
    local = reset.astimezone(datetime.now().astimezone().tzinfo)
    assert (local.hour, local.minute) == (15, 45)
    assert timedelta(0) < reset - NOW <= timedelta(days=1)


def test_exit_codes_without_a_known_message() -> None:
    assert classify("", exit_code=3)[0] == "crash"
    assert classify("sh: claude-agent-acp: not found", exit_code=127)[0] == "unavailable"
    assert classify("Not logged in", exit_code=1)[0] == "auth"


def test_paths_in_an_error_never_decide_its_kind() -> None:
    # A work dir named after a status code is not that status (docs/roster.md, "Exclusions").
    assert classify("Error: failed to initialize state under /tmp/run-401-x/home/codex") == ("error", None)
    assert classify("Error: cannot open '/srv/ep-429-a/.codex/state.db'") == ("error", None)
    assert classify("request to http://127.0.0.1:4100/v1 failed: 401 Unauthorized")[0] == "auth"
    assert classify("exceeded retry limit, last status: 429 Too Many Requests")[0] == "rate_limit"


# What the five programs said when the model stub answered garbage (an HTML page, SSE whose data
# is not JSON, a stream cut short), as `make test-agents` saw them.
GARBLED = [
    "Internal error: API Error: API returned an empty or malformed response (HTTP 200) — check for a "
    "proxy or gateway intercepting the request. Response: content-type html, body is an HTML page",
    "stream disconnected before completion: stream closed before response.completed",
    "stream disconnected before completion: Transport error: network error: error decoding response body",
    "Incomplete JSON segment at the end",
    "terminated",
]


@pytest.mark.parametrize("message", GARBLED)
def test_a_garbled_answer_is_not_answering_and_says_what_to_check(message: str) -> None:
    assert classify(message, now=NOW)[0] == "unavailable"
    said = worded(message)
    assert said.startswith(
        "the model endpoint's answer is not its API; check the agent's base URL and any proxy in between ("
    )
    assert "\n" not in said and " ".join(message.split()) in said


def test_other_errors_keep_their_words() -> None:
    assert worded("Internal error: tool exploded") == "Internal error: tool exploded"
    assert classify("the process was terminated by the user's hook", now=NOW)[0] == "error"
