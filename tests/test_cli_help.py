"""Every command's help, as a user reads it: every option explained, exit codes, one example."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from flowd.cli import _build_parser

FLOWD = [sys.executable, "-m", "flowd"]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser, groups included: (), ("run",), ("plan", "validate"), …"""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


def _parser_for(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = _build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


COMMANDS = _commands(_build_parser())


def test_the_table_covers_the_contracts_commands() -> None:
    names = {" ".join(path) for path in COMMANDS}
    for expected in (
        "serve",
        "run",
        "plan validate",
        "plan new",
        "status",
        "cost",
        "check",
        "cancel",
        "clean",
        "demo",
        "agent script",
        "roster check",
        "schema",
    ):
        assert expected in names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "flowd")
def test_every_option_has_help_text(path: tuple[str, ...]) -> None:
    parser = _parser_for(path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        shown = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"flowd {' '.join(path)}: {shown} has no help text"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "flowd")
def test_help_shows_exit_codes_and_an_example(path: tuple[str, ...]) -> None:
    proc = subprocess.run([*FLOWD, *path, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\nexit codes: " in out, out
    example = re.split(r"\nexamples?:\n", out, maxsplit=1)
    assert len(example) == 2, out
    for line in example[1].strip().splitlines():
        assert line.strip().startswith("flowd " + " ".join(path[:1])), example[1]
    parser = _parser_for(path)
    for action in parser._actions:
        for option in action.option_strings:
            assert option in out
        if action.help and not isinstance(action, argparse._SubParsersAction):
            # The help text is printed (argparse may wrap it: compare its first words).
            assert " ".join(action.help.split()[:3]) in " ".join(out.split())


def test_answer_help_shows_how_to_approve_a_story_before_it_merges() -> None:
    """docs/answers.md: a story paused before merge takes `approve`, or free text (changes)."""
    out = subprocess.run([*FLOWD, "answer", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert re.search(r"^  flowd answer \S+ --story api approve$", out, re.M), out
    assert "`approve`" in " ".join(out.split())
