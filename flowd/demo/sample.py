"""Builds the demo's sample repository: a small Python package with tests, an epic whose scripted
coders really implement each story, and a roster using the bundled scripted agent.

Stories: `core` → (`parser`, `format`) → `cli` (a diamond), and `docs` on its own. The `docs`
coder also writes a stray file outside its perimeter once, so the demo shows the perimeter at work.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from flowd.vcs.gitops import init_repo

SAMPLE_EPIC_ID = "calc"
MODEL = "claude-sonnet-4-5"

FILES: dict[str, str] = {
    "README.md": "# calc\n\nA tiny calculator package (the flowd demo's sample repository).\n",
    "calc/__init__.py": '"""A tiny calculator."""\n',
    "tests/__init__.py": "",
    "tests/test_smoke.py": (
        "import unittest\n\nimport calc\n\n\nclass Smoke(unittest.TestCase):\n"
        "    def test_package_imports(self) -> None:\n        self.assertTrue(calc.__doc__)\n"
    ),
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.0.1"\n',
    ".gitignore": "__pycache__/\n",
}

CORE = '''"""Arithmetic on integers."""


def add(a: int, b: int) -> int:
    return a + b


def sub(a: int, b: int) -> int:
    return a - b
'''
CORE_TEST = """import unittest

from calc.core import add, sub


class Core(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_sub(self) -> None:
        self.assertEqual(sub(2, 3), -1)
"""
PARSER = '''"""Parse "a + b" and "a - b"."""

from calc.core import add, sub


def evaluate(text: str) -> int:
    left, op, right = text.split()
    if op == "+":
        return add(int(left), int(right))
    if op == "-":
        return sub(int(left), int(right))
    raise ValueError(f"unknown operator {op!r}")
'''
PARSER_TEST = """import unittest

from calc.parser import evaluate


class Parser(unittest.TestCase):
    def test_evaluate(self) -> None:
        self.assertEqual(evaluate("2 + 3"), 5)
        self.assertEqual(evaluate("2 - 3"), -1)

    def test_unknown_operator(self) -> None:
        with self.assertRaises(ValueError):
            evaluate("2 * 3")
"""
FORMAT = '''"""Format results."""


def show(expression: str, value: int) -> str:
    return f"{expression} = {value}"
'''
FORMAT_TEST = """import unittest

from calc.format import show


class Format(unittest.TestCase):
    def test_show(self) -> None:
        self.assertEqual(show("2 + 3", 5), "2 + 3 = 5")
"""
CLI = '''"""Command line: python -m calc.cli "2 + 3"."""

import sys

from calc.format import show
from calc.parser import evaluate


def main(argv: list[str]) -> int:
    expression = " ".join(argv)
    print(show(expression, evaluate(expression)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
'''
CLI_TEST = """import contextlib
import io
import unittest

from calc.cli import main


class Cli(unittest.TestCase):
    def test_main(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["2", "+", "3"]), 0)
        self.assertEqual(out.getvalue(), "2 + 3 = 5\\n")
"""
DOCS = "# Using calc\n\n```sh\npython -m calc.cli 2 + 3\n```\n"


def _story(
    story_id: str, title: str, owned: list[str], depends: list[str], acceptance: list[str]
) -> dict[str, Any]:
    return {
        "id": story_id,
        "title": title,
        "description": f"{title} for the calc package.",
        "owned": owned,
        "sharedReadOnly": ["calc/__init__.py"] if story_id != "docs" else [],
        "dependsOn": depends,
        "provides": [],
        "readFirst": [],
        "acceptance": acceptance,
        "testsChange": False,
    }


PLAN: dict[str, Any] = {
    "epicId": SAMPLE_EPIC_ID,
    "epic": "Grow calc into a small calculator with a parser, a formatter, a CLI and docs",
    "stories": [
        _story("core", "Arithmetic core", ["calc/core.py", "tests/test_core.py"], [], ["add and sub work"]),
        _story("parser", "Expression parser", ["calc/parser.py", "tests/test_parser.py"], ["core"],
               ["evaluate('2 + 3') == 5"]),
        _story("format", "Result formatter", ["calc/format.py", "tests/test_format.py"], ["core"],
               ["show() renders 'a = b'"]),
        _story("cli", "Command line", ["calc/cli.py", "tests/test_cli.py"], ["parser", "format"],
               ["python -m calc.cli 2 + 3 prints 2 + 3 = 5"]),
        _story("docs", "User docs", ["docs/"], [], ["docs/usage.md explains the CLI"]),
    ],
}  # fmt: skip


def _tasks(*items: tuple[str, str]) -> str:
    return json.dumps({"tasks": [{"title": t, "description": d} for t, d in items]})


def _usage(inp: int, out: int, cost: float | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"input": inp, "output": out, "cachedRead": inp // 4}
    if cost is not None:
        usage["costUsd"] = cost
    return usage


def script() -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {"when": {"role": "planner", "story": "core"}, "usage": _usage(900, 150),
         "reply": _tasks(("Implement add and sub", "Write calc/core.py. Satisfies: 1. Owns: calc/core.py"),
                         ("Test the core", "Write tests/test_core.py. Satisfies: 1. Owns: tests/test_core.py"))},
        {"when": {"role": "planner", "story": "parser"}, "usage": _usage(900, 120),
         "reply": _tasks(("Implement evaluate", "Write calc/parser.py with its tests. Satisfies: 1"))},
        {"when": {"role": "planner", "story": "format"}, "usage": _usage(800, 100),
         "reply": _tasks(("Implement show", "Write calc/format.py with its tests. Satisfies: 1"))},
        {"when": {"role": "planner", "story": "cli"}, "usage": _usage(950, 140),
         "reply": _tasks(("Implement the CLI", "Write calc/cli.py with its tests. Satisfies: 1"))},
        {"when": {"role": "planner", "story": "docs"}, "usage": _usage(700, 90),
         "reply": _tasks(("Write the usage page", "Write docs/usage.md. Satisfies: 1"))},
        {"when": {"role": "coder", "story": "core", "task": "Implement add"}, "delayMs": 300,
         "writes": {"calc/core.py": CORE}, "reply": "Added add and sub.", "usage": _usage(4200, 600, 0.0215)},
        {"when": {"role": "coder", "story": "core", "task": "Test the core"}, "delayMs": 200,
         "writes": {"tests/test_core.py": CORE_TEST}, "reply": "Tested.", "usage": _usage(3100, 380, 0.0151)},
        {"when": {"role": "coder", "story": "parser"}, "delayMs": 400,
         "writes": {"calc/parser.py": PARSER, "tests/test_parser.py": PARSER_TEST},
         "reply": "evaluate() is in.", "usage": _usage(5200, 820)},
        {"when": {"role": "coder", "story": "format"}, "delayMs": 250,
         "writes": {"calc/format.py": FORMAT, "tests/test_format.py": FORMAT_TEST},
         "reply": "show() is in.", "usage": _usage(2600, 300)},
        {"when": {"role": "coder", "story": "cli"}, "delayMs": 300,
         "writes": {"calc/cli.py": CLI, "tests/test_cli.py": CLI_TEST},
         "reply": "The CLI works.", "usage": _usage(6100, 900, 0.0322)},
        # The docs coder strays once (README.md is nobody's): flowd sends it back, then restores it.
        {"when": {"role": "coder", "story": "docs"}, "times": 1, "delayMs": 200,
         "writes": {"docs/usage.md": DOCS, "README.md": "# calc\n\nSee docs/usage.md.\n"},
         "reply": "Docs written.", "usage": _usage(1800, 260)},
        {"when": {"role": "coder", "story": "docs"}, "delayMs": 100, "reply": "Left README.md alone.",
         "usage": _usage(1200, 80)},
        {"when": {"role": "reviewer"}, "usage": _usage(1500, 120),
         "reply": json.dumps({"issues": [], "summary": "Looks right."})},
        {"when": {"role": "judge"}, "usage": _usage(2000, 150),
         "reply": json.dumps({"issues": [], "summary": "Acceptance met."})},
    ]  # fmt: skip
    return {"model": MODEL, "rules": rules}


ROSTER = """# The demo's roster: flowd's bundled scripted agent stands in for real models.
[[executors]]
id = "demo"
kind = "script"
script = "demo.script.json"
model = "{model}"
roles = ["planner", "coder", "reviewer", "judge"]
slots = 3
"""


def build_sample_repo(dest: Path, *, python: str | None = None) -> tuple[Path, Path]:
    """Create the sample repository in `dest` (must be absent or empty); returns (repo, plan)."""
    repo = dest.resolve()
    if repo.exists() and any(repo.iterdir()):
        raise FileExistsError(f"{repo} is not empty")
    repo.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    plan = repo / f"{SAMPLE_EPIC_ID}.epic.json"
    plan.write_text(json.dumps(PLAN, indent=2) + "\n", encoding="utf-8")
    init_repo(repo, "calc: initial package")
    flow = repo / ".flow"
    flow.mkdir()
    (flow / "demo.script.json").write_text(json.dumps(script(), indent=2) + "\n", encoding="utf-8")
    (flow / "roster.toml").write_text(ROSTER.format(model=MODEL), encoding="utf-8")
    interpreter = python or sys.executable
    (flow / "config.toml").write_text(
        "# The gate runs the sample's tests with the interpreter that runs flowd (the standard\n"
        "# library's unittest: a plain `pip install flowd` brings no test runner).\n"
        f"gates = [{json.dumps(shlex.quote(interpreter) + ' -m unittest -q')}]\n"
        "concurrency = 3\n"
        "judgeRounds = 1\n",
        encoding="utf-8",
    )
    return repo, plan
