"""The agent's pydantic-free script reader agrees with the pydantic models: what it accepts reads
exactly as `load_script` reads it, and what it is unsure of is left to `load_script`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from flowd.agents.factory import script_command
from flowd.store.script_model import Script, plain
from flowd.store.script_rules import Rule, ScriptUsage, When, read_script

CONTRACT_EXAMPLE = {
    "model": "scripted",
    "rules": [
        {
            "when": {"role": "coder", "story": "api", "task": "regex", "prompt": "regex"},
            "times": 1,
            "delayMs": 200,
            "writes": {"src/api/login.py": "def login(): ...\n"},
            "deletes": ["old.py"],
            "run": ["sh -c 'echo hi > x'"],
            "reply": "text",
            "usage": {"input": 1200, "output": 300, "cachedRead": 0, "cacheWrite": 0, "costUsd": 0.012},
            "fail": "rate_limit",
        },
        {},
        {"when": {"role": None}, "times": None, "usage": {"costUsd": 1}, "reply": None},
    ],
}


def pydantic_reading(data: Any) -> Any:
    """What `load_script` makes of `data`: the script as plain data, or None when it refuses it."""
    try:
        return plain(Script.model_validate(data))
    except ValidationError:
        return None


def test_the_contract_example_reads_as_pydantic_reads_it() -> None:
    fast = read_script(CONTRACT_EXAMPLE)
    assert fast is not None
    assert fast == pydantic_reading(CONTRACT_EXAMPLE)
    assert fast.rules[0].when == When(role="coder", story="api", task="regex", prompt="regex")
    assert fast.rules[0].usage == ScriptUsage(input=1200, output=300, cost_usd=0.012)
    assert fast.rules[1] == Rule()
    assert fast.rules[2].usage == ScriptUsage(cost_usd=1.0)


@pytest.mark.parametrize(
    "data",
    [
        {"rules": [{"delay_ms": 5}]},  # the Python name: pydantic takes it, the fast reader defers
        {"rules": [{"delayMs": "200"}]},  # coercible
        {"rules": [{"delayMs": 2.0}]},
        {"rules": [{"times": True}]},
        {"rules": [{"usage": {"cached_read": 0}}]},
    ],
)
def test_what_pydantic_coerces_is_left_to_pydantic(data: Any) -> None:
    assert read_script(data) is None
    assert pydantic_reading(data) is not None


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"rules": {}},
        {"model": None},
        {"rules": [{"wen": {}}]},
        {"rules": [{"times": 0}]},
        {"rules": [{"delayMs": -1}]},
        {"rules": [{"when": None}]},
        {"rules": [{"when": {"task": "("}}]},
        {"rules": [{"when": {"prompt": 3}}]},
        {"rules": [{"writes": {" ": "x"}}]},
        {"rules": [{"deletes": [""]}]},
        {"rules": [{"run": [1]}]},
        {"rules": [{"fail": "explode"}]},
        {"rules": [{"usage": {"input": 10, "cachedRead": 20}}]},
        {"rules": [{"usage": {"costUsd": -0.5}}]},
        {"rules": [{"usage": {"costUsd": float("nan")}}]},
        {"rules": [{"reply": 5}]},
    ],
)
def test_what_pydantic_refuses_the_fast_reader_refuses(data: Any) -> None:
    assert pydantic_reading(data) is None
    assert read_script(data) is None


# Mostly plausible values per key, with a share of anything (VALUES) to probe the edges.
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-2, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", " ", "x", "(", "3"]),
    st.lists(st.sampled_from(["", "a", 1]), max_size=2),
    st.dictionaries(st.sampled_from(["a", " ", "role"]), st.sampled_from(["x", 1]), max_size=2),
)


def keyed(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with some of `fields`, each value from its strategy or, at times, anything."""
    items = [st.tuples(st.just(k), st.one_of(*[v] * 9, VALUES)) for k, v in fields.items()]
    return st.lists(st.one_of(*items), max_size=len(fields)).map(dict)


TEXT = st.sampled_from(["coder", "api", "log.n", "(?i)x", "a b"])
COUNT = st.integers(min_value=0, max_value=400)
USAGE = keyed(
    input=COUNT,
    output=COUNT,
    cachedRead=st.integers(0, 5),
    cacheWrite=st.integers(0, 5),
    costUsd=st.floats(0, 2),
)
WHEN = keyed(role=TEXT, story=TEXT, task=TEXT, prompt=TEXT)
RULE = keyed(
    when=WHEN,
    times=st.integers(min_value=1, max_value=3),
    delayMs=COUNT,
    writes=st.dictionaries(TEXT, TEXT, max_size=2),
    deletes=st.lists(TEXT, max_size=2),
    run=st.lists(TEXT, max_size=2),
    reply=TEXT,
    usage=USAGE,
    fail=st.sampled_from(["rate_limit", "usage_limit", "auth", "crash", "hang", "error", "explode"]),
)
# A key pydantic may take (`delay_ms`, by its Python name) or refuse (`oops`): the fast reader defers.
ODD_RULE = st.tuples(RULE, st.sampled_from(["delay_ms", "oops"]), COUNT).map(lambda t: {**t[0], t[1]: t[2]})
SCRIPT = keyed(model=TEXT, rules=st.lists(st.one_of(*[RULE] * 5, ODD_RULE), min_size=1, max_size=3))


@settings(max_examples=400, deadline=None)
@given(SCRIPT)
def test_the_fast_reader_never_disagrees_with_pydantic(data: Any) -> None:
    fast = read_script(data)
    if fast is not None:
        assert fast == pydantic_reading(data)


def test_a_bad_script_is_reported_by_the_agent_as_by_flowd(tmp_path: Path) -> None:
    script = tmp_path / "bad.script.json"
    script.write_text(json.dumps({"rules": [{"times": 0, "wen": {}}]}))
    done = subprocess.run(
        script_command(script), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"{script} has 2 problems" in done.stderr
    assert "rules[0].wen: unknown key" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_coercible_script_is_served(tmp_path: Path) -> None:
    """`"delayMs": "0"` is not plainly valid: pydantic reads it, and the agent serves it."""
    script = tmp_path / "lax.script.json"
    script.write_text(json.dumps({"model": "m", "rules": [{"delayMs": "0", "reply": "ok"}]}))
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    done = subprocess.run(
        script_command(script),
        input=json.dumps(initialize) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["agentInfo"]["name"] == "flowd-script"
