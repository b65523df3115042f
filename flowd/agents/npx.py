"""An `npx [-y] PACKAGE ARGS…` agent command run as the program npx would run (docs/sandbox.md
"Caches").

A confined lane has an npm cache of its own (no lane writes the user's `~/.npm`, where another
lane or the user's next install would run what it planted), so `npx` inside a lane would download
the agent's package again in every lane: 23 s and 588 MB for claude-agent-acp here. The roster's
command is the user's own, not a lane's, so flowd lets npx install or find the package once,
unconfined, in the user's cache, and starts the confined agent from the installed program
directly; the lane only reads it. Anything else (another npx option, no package, a failed
resolution) is left to run as written, and fails in its own words.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from flowd.programs.table import program_output
from flowd.sandbox.confine import current

_YES = ("-y", "--yes")
_MARK = "FLOWD_NPX_PATH="
_RESOLVE_TIMEOUT_S = 600.0  # a first download of a big agent package
_RESOLVED: dict[tuple[str, str], Path] = {}  # (package spec, npm cache) → the program's path


def npx_package(command: list[str]) -> tuple[str, list[str]] | None:
    """(package spec, its arguments) of `npx [-y|--yes] SPEC ARGS…`; None for any other command."""
    if not command or Path(command[0]).name != "npx":
        return None
    rest = command[1:]
    while rest and rest[0] in _YES:
        rest = rest[1:]
    if not rest or rest[0].startswith("-"):
        return None  # another npx option: run as written
    return rest[0], rest[1:]


def program_in(bin_dir: Path) -> Path | None:
    """The program npx runs for the one package installed beside `bin_dir` (its `node_modules/.bin`):
    the package's only command, or the one named as the package is (npm's own rule)."""
    try:
        wanted = json.loads((bin_dir.parent.parent / "package.json").read_text(encoding="utf-8"))
        (name,) = wanted["dependencies"]
        package = json.loads((bin_dir.parent / name / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    bins = package.get("bin")
    unscoped = str(name).rsplit("/", 1)[-1]
    if isinstance(bins, str):
        chosen = unscoped
    elif isinstance(bins, dict) and len(bins) == 1:
        (chosen,) = bins
    elif isinstance(bins, dict) and unscoped in bins:
        chosen = unscoped
    else:
        return None
    program = bin_dir / str(chosen)
    return program if os.access(program, os.X_OK) else None


async def resolved(command: list[str], env: dict[str, str]) -> list[str]:
    """`command` with an npx package replaced by its installed program (installed first, in the
    user's cache, when missing); `command` itself when it is not such an npx command or npx could
    not say."""
    found = npx_package(command)
    if found is None:
        return command
    spec, args = found
    key = (spec, env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE") or "")
    program = _RESOLVED.get(key)
    if program is None or not os.access(program, os.X_OK):
        program = await _install(command[0], spec, env)
        if program is None:
            return command
        _RESOLVED[key] = program
    return [str(program), *args]


async def _install(npx: str, spec: str, env: dict[str, str]) -> Path | None:
    """Where npx keeps `spec`'s programs, asked of npx itself (it installs the package if needed)."""
    ran = await program_output(
        [npx, "--yes", f"--package={spec}", "-c", f'echo "{_MARK}$PATH"'], env, _RESOLVE_TIMEOUT_S
    )
    if ran is None:
        return None
    _code, out = ran
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith(_MARK):
            for entry in line.removeprefix(_MARK).split(os.pathsep):
                if f"{os.sep}_npx{os.sep}" in entry:
                    return program_in(Path(entry))
    return None


async def for_lane(command: list[str], env: dict[str, str]) -> list[str]:
    """The command an agent process starts with: an npx package resolved first where lanes are
    confined (they cannot write the user's npm cache), as written elsewhere."""
    confinement = current()
    if confinement is None or not confinement.enforcing:
        return command
    return await resolved(command, env)
