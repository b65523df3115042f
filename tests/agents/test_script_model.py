"""The script file: loading errors that name the file, matching, `times`, the schema command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowd.base.errors import FileProblems
from flowd.schema.json_schema import schema_for
from flowd.store.script_model import Script, load_script, pick_rule


def _load(tmp_path: Path, data: object) -> Script:
    path = tmp_path / "s.script.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return load_script(path)


def test_the_contract_example_loads(tmp_path: Path) -> None:
    script = _load(
        tmp_path,
        {
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
                    "usage": {
                        "input": 1200,
                        "output": 300,
                        "cachedRead": 0,
                        "cacheWrite": 0,
                        "costUsd": 0.012,
                    },
                    "fail": "rate_limit",
                }
            ],
        },
    )
    rule = script.rules[0]
    assert (rule.times, rule.delay_ms, rule.fail) == (1, 200, "rate_limit")
    assert rule.usage is not None and rule.usage.cost_usd == 0.012


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("{not json", "is not valid JSON"),
        ({"rules": [{"fail": "explode"}]}, "rules[0].fail"),
        ({"rules": [{"when": {"task": "("}}]}, "rules[0].when.task: is not a valid regular expression"),
        ({"rules": [{"wen": {}}]}, "rules[0].wen: unknown key"),
        ({"rules": [{"times": 0}]}, "rules[0].times"),
        ({"rules": [{"usage": {"input": 10, "cachedRead": 20}}]}, "at least cachedRead + cacheWrite"),
        ({"rules": [{"writes": {"": "x"}}]}, "must not be empty"),
    ],
)
def test_bad_scripts_are_one_error_naming_the_file(tmp_path: Path, data: object, expected: str) -> None:
    with pytest.raises(FileProblems) as caught:
        _load(tmp_path, data)
    assert str(tmp_path / "s.script.json") in str(caught.value)
    assert expected in str(caught.value)


def test_a_missing_script_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileProblems, match=r"nope\.json: does not exist; check the path"):
        load_script(tmp_path / "nope.json")


def test_first_matching_rule_with_times_left_answers() -> None:
    script = Script.model_validate(
        {
            "rules": [
                {"when": {"role": "coder", "story": "api"}, "times": 2, "reply": "a"},
                {"when": {"role": "coder", "task": "log+in"}, "reply": "b"},
                {"when": {"prompt": "(?i)REVIEW"}, "reply": "c"},
            ]
        }
    )

    def pick(counts: dict[int, int], **kw: str | None) -> int | None:
        where: dict[str, str | None] = {"role": "coder", "story": "api", "task": None, **kw}
        return pick_rule(
            script,
            counts,
            role=where["role"],
            story=where["story"],
            task=where["task"],
            prompt=str(where.get("prompt") or ""),
        )

    assert pick({}) == 0
    assert pick({0: 1}) == 0
    assert pick({0: 2}) is None  # used up, and the others do not match
    assert pick({0: 2}, task="add logggin") == 1
    assert pick({}, story="apix", task="login") == 1  # story matches exactly, not as a prefix
    assert pick({}, role="reviewer", prompt="please review") == 2
    assert pick({}, role="reviewer", task="login") is None


def test_schema_script_describes_the_file() -> None:
    schema = schema_for("script")
    rule = schema["$defs"]["Rule"]["properties"]
    assert {"when", "times", "delayMs", "writes", "deletes", "run", "reply", "usage", "fail"} <= set(rule)
