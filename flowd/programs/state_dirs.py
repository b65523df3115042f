"""Where each agent program keeps its own state: the directories a confined lane may write
outside its worktree (docs/sandbox.md). One table, beside the programs' table (programs.py).

Each entry is a path relative to the home directory, or the value of an environment variable
the program honours instead (the roster's `env`, then flowd's own environment). Entries that
end in `/` are directories flowd creates when missing (the program would create them on its
first start, and a confined process cannot); the others are granted only when they exist.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flowd.programs.table import program_of


@dataclass(frozen=True)
class StateDirs:
    home: tuple[str, ...] = ()  # relative to $HOME
    env: tuple[tuple[str, str], ...] = ()  # (variable, what under it): when set, replaces `home`
    temp: str | None = None  # a directory under flowd's temp dir (a lane's TMPDIR is its own)
    fixed: tuple[str, ...] = ()  # absolute directories the program insists on (`{uid}`: the user's id)


SCRIPT = "flowd agent script"
_SCRIPT_ARGS = ["-m", "flowd", "agent", "script"]

# Keyed by the programs' binary names (programs.py `Program.binary`).
STATE_DIRS: dict[str, StateDirs] = {
    "claude-agent-acp": StateDirs(
        home=(".claude/", ".claude.json", ".cache/claude-cli-nodejs/"), env=(("CLAUDE_CONFIG_DIR", ""),)
    ),
    "claude": StateDirs(
        home=(".claude/", ".claude.json", ".cache/claude-cli-nodejs/"), env=(("CLAUDE_CONFIG_DIR", ""),)
    ),
    # codex keeps its sandbox helper's socket in /tmp whatever TMPDIR says.
    "codex-acp": StateDirs(home=(".codex/",), env=(("CODEX_HOME", ""),), fixed=("/tmp/codex-daemon-{uid}",)),
    "codex": StateDirs(home=(".codex/",), env=(("CODEX_HOME", ""),), fixed=("/tmp/codex-daemon-{uid}",)),
    "gemini": StateDirs(home=(".gemini/",), env=(("GEMINI_CLI_HOME", ""),)),
    # The scripted agent's `times` counts, shared by all its processes (docs/scripted-agent.md).
    SCRIPT: StateDirs(env=(("FLOWD_SCRIPT_STATE", ""),), temp="flowd-script-state"),
}
# The user's package caches (npx runs every npm-installed agent; gates install and build): no
# lane writes them, since what one lane plants there another lane, or the user's own next
# install, would run. Each lane gets caches of its own instead (docs/sandbox.md "Caches"):
# (variable the tool honours, the directory's name in the lane's cache dir).
SHARED_CACHES: tuple[str, ...] = (".npm", ".cache/pip", ".cache/uv", ".cache/node-gyp", ".cache/go-build")
LANE_CACHES: tuple[tuple[str, str], ...] = (
    ("npm_config_cache", "npm"),
    ("PIP_CACHE_DIR", "pip"),
    ("UV_CACHE_DIR", "uv"),
    ("GOCACHE", "go-build"),
)
# node-gyp's header cache (`~/.cache/node-gyp`) has no variable of its own but npm's
# `npm_config_devdir`, which npm 11 warns about on every command: it stays read-only, used as it is.


def program_key(kind: str, command: list[str] | None) -> str | None:
    """The table's key for the program a roster entry runs (None: not one flowd knows)."""
    if command and command[1:5] == _SCRIPT_ARGS:
        return SCRIPT
    program = program_of(kind, command)
    return program.binary if program is not None else None


def state_paths(
    key: str | None, env: dict[str, str], home: Path
) -> tuple[list[tuple[Path, bool]], dict[str, str]]:
    """(path, create when missing) for the program's own state, and the variables that pin it
    there for the child; nothing for an unknown program."""
    table = STATE_DIRS.get(key) if key is not None else None
    if table is None:
        return [], {}
    fixed = [(Path(entry.format(uid=os.getuid())), True) for entry in table.fixed]
    for variable, under in table.env:
        value = env.get(variable) or os.environ.get(variable)
        if value:
            return [(Path(value).expanduser() / under, True), *fixed], {}
    if table.temp is not None:
        path = Path(tempfile.gettempdir()) / table.temp
        return [(path, True)], {variable: str(path) for variable, _ in table.env[:1]}
    return [*((home / entry.rstrip("/"), entry.endswith("/")) for entry in table.home), *fixed], {}


def every_state_root(home: Path) -> list[Path]:
    """Where any known agent program keeps its state for this user and environment: the places
    detection does not count as escapes when they appear (docs/sandbox-detection.md)."""
    roots: list[Path] = []
    for key in STATE_DIRS:
        owned, _pins = state_paths(key, {}, home)
        roots += [path for path, _create in owned]
    return roots + shared_caches(home)


def shared_caches(home: Path) -> list[Path]:
    return [home / entry for entry in SHARED_CACHES]


def lane_caches(cache_dir: Path) -> dict[str, str]:
    """The variables that point each package manager at its cache in a lane's `cache_dir`."""
    return {variable: str(cache_dir / name) for variable, name in LANE_CACHES}
