"""The scripted agent's script as plain data, and the rule matching (docs/scripted-agent.md).

The agent process reads its script with `read_script`, which needs neither pydantic nor the
`acp` SDK: a clone starts in tens of milliseconds instead of a second (docs/performance.md
"Throughput"). `read_script` accepts only what is plainly valid in the script's own spelling
(camelCase keys, exact types); anything else — a typo, a coercible value like `"200"` — returns
None and the caller lets `script_model.load_script` judge it, so the error messages, and what
is accepted, stay exactly those of the pydantic models `flowd schema script` prints.

`matches` and `pick_rule` work on either form (these dataclasses or `script_model.Script`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

FAIL_MODES = frozenset({"rate_limit", "usage_limit", "auth", "crash", "hang", "error"})


# Named tuples, not dataclasses: `dataclasses` (and the `inspect` it imports) cost a clone more
# CPU than the rest of this module. Read-only, so the shared empty defaults are never changed.
class When(NamedTuple):
    role: str | None = None
    story: str | None = None
    task: str | None = None
    prompt: str | None = None


class ScriptUsage(NamedTuple):
    input: int = 0
    output: int = 0
    cached_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None


class Rule(NamedTuple):
    when: When = When()
    times: int | None = None
    delay_ms: int = 0
    writes: dict[str, str] = {}
    deletes: list[str] = []
    run: list[str] = []
    reply: str | None = None
    usage: ScriptUsage | None = None
    fail: str | None = None


class Script(NamedTuple):
    model: str = "scripted"
    rules: list[Rule] = []


class _Unsure(Exception):
    """Not plainly valid: the full validator decides."""


def read_script(data: Any) -> Script | None:
    """`data` (parsed JSON) as a `Script` when it is plainly valid, else None (see the module doc)."""
    try:
        obj = _object(data, {"model", "rules"})
        model = obj.get("model", "scripted")
        return Script(model=_text(model), rules=[_rule(item) for item in _list(obj.get("rules", []))])
    except _Unsure:
        return None


def _rule(data: Any) -> Rule:
    keys = {"when", "times", "delayMs", "writes", "deletes", "run", "reply", "usage", "fail"}
    obj = _object(data, keys)
    times = _opt(obj.get("times"), lambda v: _int(v, minimum=1))
    writes = _object(obj.get("writes", {}), None)
    deletes = [_text(item) for item in _list(obj.get("deletes", []))]
    if any(not path.strip() for path in [*writes, *deletes]):
        raise _Unsure
    fail = _opt(obj.get("fail"), _text)
    if fail is not None and fail not in FAIL_MODES:
        raise _Unsure
    return Rule(
        when=_when(obj.get("when", {})),
        times=times,
        delay_ms=_int(obj.get("delayMs", 0), minimum=0),
        writes={key: _text(value) for key, value in writes.items()},
        deletes=deletes,
        run=[_text(item) for item in _list(obj.get("run", []))],
        reply=_opt(obj.get("reply"), _text),
        usage=_opt(obj.get("usage"), _usage),
        fail=fail,
    )


def _when(data: Any) -> When:
    obj = _object(data, {"role", "story", "task", "prompt"})
    when = When(**{key: _opt(value, _text) for key, value in obj.items()})
    for pattern in (when.task, when.prompt):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error:
                raise _Unsure from None
    return when


def _usage(data: Any) -> ScriptUsage:
    obj = _object(data, {"input", "output", "cachedRead", "cacheWrite", "costUsd"})
    usage = ScriptUsage(
        input=_int(obj.get("input", 0), minimum=0),
        output=_int(obj.get("output", 0), minimum=0),
        cached_read=_int(obj.get("cachedRead", 0), minimum=0),
        cache_write=_int(obj.get("cacheWrite", 0), minimum=0),
        cost_usd=_opt(obj.get("costUsd"), _cost),
    )
    if usage.cached_read + usage.cache_write > usage.input:
        raise _Unsure
    return usage


def _object(value: Any, keys: set[str] | None) -> dict[str, Any]:
    if type(value) is not dict or (keys is not None and not keys.issuperset(value)):
        raise _Unsure
    return value


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _Unsure
    return value


def _text(value: Any) -> str:
    if type(value) is not str:
        raise _Unsure
    return value


def _int(value: Any, *, minimum: int) -> int:
    if type(value) is not int or value < minimum:
        raise _Unsure
    return value


def _cost(value: Any) -> float:
    if type(value) not in (int, float) or math.isnan(value) or value < 0:
        raise _Unsure
    return float(value)


def _opt(value: Any, read: Any) -> Any:
    return None if value is None else read(value)


class WhenLike(Protocol):
    @property
    def role(self) -> str | None: ...
    @property
    def story(self) -> str | None: ...
    @property
    def task(self) -> str | None: ...
    @property
    def prompt(self) -> str | None: ...


class RuleLike(Protocol):
    @property
    def when(self) -> WhenLike: ...
    @property
    def times(self) -> int | None: ...


class ScriptLike(Protocol):
    @property
    def rules(self) -> Sequence[RuleLike]: ...


def matches(rule: RuleLike, *, role: str | None, story: str | None, task: str | None, prompt: str) -> bool:
    """`role` and `story` match exactly; `task` and `prompt` are regexes searched in the text."""
    when = rule.when
    if when.role is not None and when.role != role:
        return False
    if when.story is not None and when.story != story:
        return False
    if when.task is not None and (task is None or re.search(when.task, task) is None):
        return False
    return not (when.prompt is not None and re.search(when.prompt, prompt) is None)


def pick_rule(
    script: ScriptLike,
    counts: dict[int, int],
    *,
    role: str | None,
    story: str | None,
    task: str | None,
    prompt: str,
) -> int | None:
    """The index of the first matching rule whose `times` is not used up, given this run's counts."""
    for index, rule in enumerate(script.rules):
        if rule.times is not None and counts.get(index, 0) >= rule.times:
            continue
        if matches(rule, role=role, story=story, task=task, prompt=prompt):
            return index
    return None
