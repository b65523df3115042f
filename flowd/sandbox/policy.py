"""What a lane's processes may read and write (docs/sandbox.md "The policy"), as Landlock rules.

Landlock only grants: a right is refused unless a rule on the path or one of its parents grants
it, and a rule cannot carve a hole beneath itself. So writes are a short allow-list (the lane's
own places), and reads are an allow-list of everything except the secrets: every entry of `/`
whole, except the directories that lead to a secret, which are opened one level further (their
own listing is readable, their other entries whole), down to the secret itself, which gets no
rule. Entries made after the rules were built (a new file in `$HOME`) are not readable until the
next process starts.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from flowd.base.layout import LANE_GIT
from flowd.sandbox.landlock import READ, READ_DIR, WRITE, Rule

# Relative to $HOME: what no lane reads unless `allowRead` names it.
SECRETS: tuple[str, ...] = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/*/credentials",
    ".config/*/credentials.json",
    ".cache/flowd/daemon",
    "/run/user/*/flowd",  # flowd's daemon: its socket's name, the page's token
)
# The devices a process writes to; the rest of /dev stays read-only (no raw disks).
DEVICES: tuple[str, ...] = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
)


def secret_paths(home: Path, allow_read: list[Path]) -> list[str]:
    """The secrets present on this machine, resolved, minus those `allowRead` lets through."""
    found: list[str] = []
    for pattern in SECRETS:
        for match in glob.glob(str(home / pattern)):
            real = os.path.realpath(match)
            if not any(_within(real, str(allowed)) for allowed in allow_read):
                found.append(real)
    return sorted(set(found))


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_rules(home: Path, allow_read: list[Path]) -> list[Rule]:
    """Read everything but the secrets (module docstring): a handful of rules per secret."""
    secrets = secret_paths(home, allow_read)
    rules: list[Rule] = []
    _grant_read("/", secrets, rules)
    rules.extend(Rule(str(path), READ) for path in allow_read)
    return rules


def _grant_read(directory: str, secrets: list[str], rules: list[Rule]) -> None:
    rules.append(Rule(directory, READ_DIR))
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        real = os.path.realpath(entry.path)
        if any(_within(real, secret) for secret in secrets):
            continue  # a secret, or a link to (or into) one
        leads_to_secret = [s for s in secrets if _within(s, real)]
        if not leads_to_secret:
            rules.append(Rule(real, READ))
        elif entry.is_symlink():
            continue  # reached through its real path, which is opened where it lies
        else:
            _grant_read(real, secrets, rules)


@dataclass(frozen=True)
class LanePlaces:
    """Where one lane's processes may write. `worktree` None: a process of no lane (a planner,
    a version check): it may write only its temp dir and its program's state."""

    worktree: Path | None
    # Its own git places in its admin dir `<common>/worktrees/<id>/` (the admin dir itself is
    # flowd's): the lane repository `flowd-git/`, the quarantine `flowd-objects/`, `modules/`.
    git_dirs: tuple[Path, ...]
    temp: Path
    state: tuple[Path, ...] = ()  # the program's own state dirs (a link of the user's is followed)
    extra: tuple[Path, ...] = ()  # `allowWrite`
    cache: Path | None = None  # the lane's package caches (docs/sandbox.md "Caches")


def write_rules(places: LanePlaces) -> list[Rule]:
    """The lane's own places are granted by their real paths, never through a link (`follow`
    False, docs/sandbox.md "Links a lane planted"): its temp and cache folders lie where it can
    write, and a link it put there must not widen what its next process may write. Devices, the
    program's state dirs and `allowWrite` are the user's to link where they like."""
    rules = [Rule(path, WRITE | READ) for path in DEVICES]
    own = [places.worktree, *places.git_dirs, places.temp, places.cache]
    rules.extend(Rule(str(path), WRITE | READ, follow=False) for path in own if path is not None)
    rules.extend(Rule(str(path), WRITE | READ) for path in (*places.state, *places.extra))
    return rules


@dataclass(frozen=True)
class Protected:
    """The places a refusal or a change is named by (LaneEscape `what`)."""

    checkout: Path
    common_dir: Path
    flow_dir: Path
    lanes_root: Path
    home: Path
    secrets: tuple[str, ...]


def what_is(path: str, own: tuple[Path, ...], places: Protected) -> str | None:
    """The kind of protected place `path` is, or None when it is one of the lane's own."""
    real = os.path.realpath(path)
    common = str(places.common_dir)
    if any(_within(real, str(mine)) for mine in own):
        return None
    if any(_within(real, secret) for secret in places.secrets):
        return "secret"
    if real == str(places.home / ".gitconfig") or _within(real, str(places.home / ".config" / "git")):
        return "gitConfig"
    if _within(real, os.path.join(common, "objects")):
        return "gitObjects"
    if _within(real, os.path.join(common, "hooks")):
        return "gitHooks"
    if real == os.path.join(common, "config") or _within(real, os.path.join(common, "info")):
        return "gitConfig"
    if _within(real, os.path.join(common, "refs")) or _within(real, os.path.join(common, "packed-refs")):
        return "gitRef"
    if any(m.name == LANE_GIT and _within(real, str(m.parent)) for m in own):
        return "gitDir"  # its own admin dir, flowd's (docs/sandbox.md "The lane repository")
    if _within(real, os.path.join(common, "worktrees")):
        return "otherLane"
    if _within(real, str(places.flow_dir)):
        return "flowState"
    if _within(real, str(places.checkout)):
        return "checkout"
    if _within(real, str(places.lanes_root)):
        return "otherLane"
    if _within(real, str(places.home)):
        return "home"
    return "outside"
