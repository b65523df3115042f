"""The run's lane confinement (docs/sandbox.md): built once per run (or per Ray node lane), it
says once what is in force and turns each refusal the OS made into a `LaneEscape` (`denied`)
and a line of the story's findings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

from flowd.base.layout import EPIC_LANE
from flowd.engine.state import EpicPaths, append_findings
from flowd.events.model import EscapeWhat, Event, Info, LaneEscape
from flowd.sandbox.confine import Confinement
from flowd.store.config import Settings
from flowd.vcs.gitops import Repo

# What a refusal that names no path refused (docs/sandbox.md "Signals", "Abstract sockets").
_PAST = {
    "signal": "a signal to a process outside this story's lane",
    "socket": "a connection to a socket outside this story's lane",
}


def run_confinement(
    repo: Repo,
    settings: Settings,
    lanes_root: Path,
    epic_id: str,
    paths: EpicPaths,
    emit: Callable[[Event], object],
) -> Confinement:
    def report(lane: str, path: str, what: str, origin: str) -> None:
        if not lane:
            return  # a process of no lane (none today: every turn runs in a lane's worktree)
        emit(LaneEscape(lane=lane, path=path, what=cast(EscapeWhat, what), action="denied"))
        if lane != EPIC_LANE:
            past = _PAST.get(what, "a path past this story's lane")
            append_findings(
                paths,
                lane,
                f"## Confinement refused\n\nThe OS refused {origin} {past}: `{path}` ({what}); see docs/sandbox.md.",
            )

    sandbox = settings.sandbox
    return Confinement(
        sandbox.mode,
        checkout=repo.root,
        common_dir=repo.common_dir,
        lanes_root=lanes_root,
        epic=epic_id,
        allow_write=sandbox.allow_write,
        allow_read=sandbox.allow_read,
        report=report,
    )


def announcement(confinement: Confinement, setting: str) -> Info | None:
    """What the run says once about its confinement: nothing when it enforces."""
    if confinement.mode == "enforce":
        return None
    if confinement.mode == "off":
        message = 'sandbox: off ([sandbox] mode = "off"): lane processes run with your full rights'
    elif setting == "detect":
        message = (
            'sandbox: detect ([sandbox] mode = "detect"): lanes are checked after each step, not confined'
        )
    elif confinement.version > 0:
        message = (
            f"sandbox: landlock ABI {confinement.version} (detect): this kernel's Landlock is too old for "
            "git in a confined lane (ABI 2, Linux 5.19, needed), so lanes are checked after each step "
            "instead (docs/sandbox.md)"
        )
    else:
        message = (
            "sandbox: none available (detect): this system offers no Landlock, so lanes are checked "
            "after each step instead of confined (docs/sandbox.md)"
        )
    return Info(message=message)
