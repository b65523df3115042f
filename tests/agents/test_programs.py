"""The known agent programs: how a roster entry names them, and the oldest version flowd runs."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from flowd.programs.table import PROGRAMS, cli_version, program_named, program_of, too_old


@pytest.mark.parametrize(
    ("kind", "command", "name"),
    [
        ("acp", ["claude-agent-acp"], "claude-agent-acp"),
        ("acp", ["/usr/local/bin/codex-acp"], "codex-acp"),
        ("acp", ["gemini", "--acp"], "gemini"),
        ("acp", ["npx", "-y", "@agentclientprotocol/claude-agent-acp@0.101.0"], "claude-agent-acp"),
        ("cli", ["claude", "-p", "--output-format", "stream-json"], "claude -p"),
        ("cli", ["codex", "exec", "--json"], "codex exec"),
        ("cli", ["gemini"], None),
        ("acp", ["my-agent"], None),
        ("script", None, None),
    ],
)
def test_program_of_a_roster_entry(kind: str, command: list[str] | None, name: str | None) -> None:
    found = program_of(kind, command)
    assert (found.name if found else None) == name


def test_acp_programs_are_known_by_the_name_they_give() -> None:
    assert program_named("@agentclientprotocol/codex-acp") is PROGRAMS[1]
    assert program_named("flowd-script") is None


def test_too_old_is_one_sentence_naming_the_executor_and_the_fix() -> None:
    claude = next(p for p in PROGRAMS if p.name == "claude -p")
    error = too_old(claude, "2.0.9 (Claude Code)", "claude-cli#1")
    assert error == (
        "claude-cli#1: claude -p 2.0.9 is older than 2.1.332, the oldest flowd runs; install a newer "
        "one (npm install -g @anthropic-ai/claude-code@2.1.332 or later)"
    )
    assert too_old(claude, "2.1.332 (Claude Code)", "c#1") is None
    assert too_old(claude, "2.10.0", "c#1") is None  # numbers, not strings
    assert too_old(claude, "", "c#1") is None  # a version flowd cannot read is not refused


def test_cli_version_asks_the_program(tmp_path: Path) -> None:
    fake = tmp_path / "codex"
    fake.write_text("#!/bin/sh\necho codex-cli 0.100.0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    assert asyncio.run(cli_version("codex", env)) == "codex-cli 0.100.0"
    assert asyncio.run(cli_version(str(tmp_path / "missing"), env)) == ""
