"""The agent programs flowd knows by name (docs/roster.md "Working entries"): one table.

For each program: how a roster entry names it (its command), how it names itself (ACP
`agentInfo.name`, or the CLI's `--version`), the oldest version flowd runs (the version
`make test-agents` proves; an older one may lack a flag or a message shape flowd relies on), and
the model requests it makes that flowd cannot see (the cost report says so, per executor).
Programs not in the table are run as they are: no version check, no note.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Program:
    name: str  # as docs/roster.md names it
    kind: str  # the roster `kind` it runs as
    binary: str  # the command's program name
    package: str  # the npm package that installs it
    minimum: str  # the oldest version flowd runs
    agent_name: str | None = None  # ACP `agentInfo.name`
    hidden: str | None = None  # model requests flowd cannot see, in words; None: none known
    # A prompt that asks the model nothing and answers with the usage the session spent since its
    # last turn (`_meta.quota.model_usage`): flowd sends it when a session ends, so the requests
    # the program made on its own after that turn's answer are billed (agents/acp_late.py).
    usage_probe: str | None = None


PROGRAMS: tuple[Program, ...] = (
    Program(
        "claude-agent-acp",
        "acp",
        "claude-agent-acp",
        "@agentclientprotocol/claude-agent-acp",
        "0.101.0",
        agent_name="@agentclientprotocol/claude-agent-acp",
        # docs/roster.md "Side requests": the title is asked for by the adapter itself
        # (`generate_session_title`), whatever the environment says; no client option stops it.
        # A title that finishes after the session's last answer is read at the session's end
        # with `/usage`; what stays hidden is a title still unanswered then, or a killed process's.
        hidden=(
            "a session title per new session, asked for by claude-agent-acp itself; flowd bills a "
            "title that finishes after the turn's answer when the session ends, but not one still "
            "unanswered 15 s after the session's last turn, nor the requests of an agent process "
            "flowd had to kill (a stall, a timeout)"
        ),
        usage_probe="/usage",
    ),
    Program(
        "codex-acp",
        "acp",
        "codex-acp",
        "@agentclientprotocol/codex-acp",
        "2.6.0",
        agent_name="@agentclientprotocol/codex-acp",
    ),
    Program("gemini", "acp", "gemini", "@google/gemini-cli", "0.61.0", agent_name="gemini-cli"),
    Program("claude -p", "cli", "claude", "@anthropic-ai/claude-code", "2.1.332"),
    Program("codex exec", "cli", "codex", "@openai/codex", "0.171.0"),
)

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def program_of(kind: str, command: list[str] | None) -> Program | None:
    """The known program a roster entry runs: by its command's program name, or the package
    `npx` is asked to run (`npx -y @agentclientprotocol/claude-agent-acp@0.101.0`)."""
    if not command:
        return None
    words = [Path(command[0]).name]
    if words[0] in ("npx", "bunx", "pnpx"):
        words = [w for w in command[1:] if not w.startswith("-")][:1]
    for program in PROGRAMS:
        if program.kind != kind:
            continue
        for word in words:
            if word in (program.binary, program.package) or word.startswith(program.package + "@"):
                return program
    return None


def program_named(agent_name: str) -> Program | None:
    """The known ACP program that calls itself `agent_name` in `initialize`."""
    return next((p for p in PROGRAMS if p.agent_name is not None and p.agent_name == agent_name), None)


def parse_version(text: str) -> tuple[int, int, int] | None:
    found = _VERSION.search(text)
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def too_old(program: Program, version_text: str, label: str) -> str | None:
    """The one sentence refusing a program older than flowd runs, or None (unknown is fine). The
    agents raise it as a sign-in failure: this executor cannot serve the run, the others can."""
    version = parse_version(version_text)
    minimum = parse_version(program.minimum)
    if version is None or minimum is None or version >= minimum:
        return None
    shown = ".".join(map(str, version))
    return (
        f"{label}: {program.name} {shown} is older than {program.minimum}, the oldest flowd runs; "
        f"install a newer one (npm install -g {program.package}@{program.minimum} or later)"
    )


_VERSIONS: dict[tuple[str, float], str] = {}  # (resolved program, mtime) → its `--version`
_VERSION_TIMEOUT_S = 30.0


async def cli_version(program_path: str, env: dict[str, str]) -> str:
    """What `<program> --version` prints (once per program file and flowd process); "" if nothing."""
    found = shutil.which(program_path, path=env.get("PATH"))
    if found is None:
        return ""  # the turn itself says it is missing, in its own words
    try:
        key = (str(Path(found).resolve()), Path(found).stat().st_mtime)
    except OSError:
        return ""
    if key in _VERSIONS:
        return _VERSIONS[key]
    ran = await program_output([found, "--version"], env, _VERSION_TIMEOUT_S)
    if ran is None:
        return ""
    code, out = ran
    text = out.decode("utf-8", "replace").strip() if code == 0 else ""
    _VERSIONS[key] = text
    return text


async def program_output(argv: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, bytes] | None:
    """(exit code, stdout) of one of the user's programs, run by flowd itself (stdin closed, stderr
    dropped, its own session); None when it cannot start or does not end within `timeout_s`."""
    import asyncio

    from flowd.base.process_start import start_process

    try:
        proc = await start_process(  # a cancel meanwhile stops it, started
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None
    return proc.returncode if proc.returncode is not None else -1, out
