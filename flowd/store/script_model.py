"""The scripted agent's script file (docs/scripted-agent.md): models, loading and rule matching.

Pure: nothing here touches processes. `flowd schema script` prints `Script`'s JSON Schema and
`load_script` validates a file, reporting every problem by field. The agent process reads its
script with the pydantic-free `script_rules.read_script` and comes here only for a script that
is not plainly valid, so both accept the same files and word the same errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from flowd.base.errors import FileProblems
from flowd.base.fsio import read_user_text
from flowd.base.wire import StrictWireModel, describe_validation_error
from flowd.store import script_rules
from flowd.store.script_rules import matches as matches
from flowd.store.script_rules import pick_rule as pick_rule

FailMode = Literal["rate_limit", "usage_limit", "auth", "crash", "hang", "error"]


class When(StrictWireModel):
    """Every key given must match; none given matches every prompt."""

    role: str | None = None
    story: str | None = None
    task: str | None = Field(default=None, description="regular expression searched in the task title")
    prompt: str | None = Field(default=None, description="regular expression searched in the prompt text")

    @field_validator("task", "prompt")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"is not a valid regular expression ({exc})")
        return value


class ScriptUsage(StrictWireModel):
    """What the turn reports, as flowd will record it (`input` counts the cache figures too)."""

    input: int = Field(default=0, ge=0)
    output: int = Field(default=0, ge=0)
    cached_read: int = Field(default=0, ge=0)
    cache_write: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _cache_within_input(self) -> ScriptUsage:
        if self.cached_read + self.cache_write > self.input:
            raise ValueError(
                "input counts every input token, cache included, so it must be at least cachedRead + cacheWrite"
            )
        return self


class Rule(StrictWireModel):
    when: When = Field(default_factory=When)
    times: int | None = Field(default=None, ge=1, description="answers at most this many prompts per run")
    delay_ms: int = Field(default=0, ge=0)
    writes: dict[str, str] = Field(default_factory=dict)
    deletes: list[str] = Field(default_factory=list)
    run: list[str] = Field(default_factory=list)
    reply: str | None = None
    usage: ScriptUsage | None = None
    fail: FailMode | None = None

    @field_validator("writes", "deletes")
    @classmethod
    def _no_empty_paths(cls, value: Any) -> Any:
        if any(not str(path).strip() for path in value):
            raise ValueError("a path must not be empty")
        return value


class Script(StrictWireModel):
    """A scripted agent's behaviour: the first rule that matches answers a prompt."""

    model: str = "scripted"
    rules: list[Rule] = Field(default_factory=list)


def load_script(path: Path) -> Script:
    """Read and validate a script file; one `FileProblems` naming the file on any problem."""
    text = read_user_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileProblems(str(path), [f"is not valid JSON ({exc.msg} at line {exc.lineno})"])
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise FileProblems(str(path), describe_validation_error(exc))


def plain(script: Script) -> script_rules.Script:
    """A validated script as the agent process's plain data (`script_rules`)."""
    converted = script_rules.read_script(script.model_dump(by_alias=True))
    if converted is None:  # every validated script reads back: a mismatch is a bug in script_rules
        raise AssertionError("script_rules.read_script refused a validated script")
    return converted
