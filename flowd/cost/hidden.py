"""Which executors of a cost report run an agent program that makes model requests flowd cannot
see (docs/cost.md "Requests flowd cannot see"): the report says so per executor.

The trace names executors by id only, so the program is read from the roster as it is when the
report is made (the user roster, then the project's, merged by id as a run merges them). This
reads the files as they are, without expanding `${VAR}` or validating the rest: a roster a run
would refuse (a key unset in this shell, say) still names its programs, and a file that cannot
be read at all just adds no note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flowd.base.errors import FlowdError
from flowd.cost.model import HiddenRequests
from flowd.programs.table import program_of
from flowd.store.config import flow_dir, read_toml, user_roster_path


def roster_commands(repo: Path, user_path: Path | None = None) -> dict[str, tuple[str, list[str]]]:
    """executor id → (kind, command) of the merged roster, read leniently."""
    merged: dict[str, dict[str, Any]] = {}
    for path in (user_path or user_roster_path(), flow_dir(repo) / "roster.toml"):
        try:
            entries = read_toml(path).get("executors", []) if path.is_file() else []
        except (FlowdError, OSError, ValueError):
            continue
        for entry in entries if isinstance(entries, list) else []:
            ident = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(ident, str):
                continue
            if entry.get("disabled") is True:
                merged.pop(ident, None)
            else:
                merged[ident] = {**merged.get(ident, {}), **entry}
    out: dict[str, tuple[str, list[str]]] = {}
    for ident, entry in merged.items():
        kind, command = entry.get("kind"), entry.get("command")
        if isinstance(kind, str) and isinstance(command, list) and all(isinstance(c, str) for c in command):
            out[ident] = (kind, command)
    return out


def hidden_requests(
    repo: Path, executor_ids: list[str], user_path: Path | None = None
) -> list[HiddenRequests]:
    """One row per executor of the report whose program is known to hide requests."""
    commands = roster_commands(repo, user_path)
    rows: list[HiddenRequests] = []
    for ident in executor_ids:
        kind, command = commands.get(ident, ("", []))
        program = program_of(kind, command)
        if program is not None and program.hidden is not None:
            rows.append(HiddenRequests(executor=ident, program=program.name, requests=program.hidden))
    return rows
