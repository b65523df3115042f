"""Lane escapes found after the fact (docs/sandbox-detection.md): which place a changed path is,
which lane's process made the change, and what flowd does about it. No I/O: the shell
(`engine/detect.py`) fingerprints the places, feeds the changes and the lanes' step windows in,
and carries out the verdict.

A change is blamed by *when* it happened: the changed file's modification time (for a removal, its
directory's) against the windows in which each lane had a process running (an agent turn, a task
gate, a setup command, until its stray children were killed). The lane that owns the place (its
own worktree, its own branch) is never blamed for it, and a step never for its own home.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowd.events.model import EscapeAction, EscapeWhat

# File times come from the kernel's coarse clock (up to a tick, a few ms, behind the wall clock
# flowd reads): a change this close to a window's edges counts as inside it.
SLACK_S = 0.02

WHAT_WORDS: dict[str, str] = {
    "checkout": "your checkout",
    "home": "the home directory",
    "gitConfig": "the repository's git configuration",
    "gitHooks": "the repository's git hooks",
    "gitRef": "a branch or ref it does not own",
    "flowState": "flowd's own settings and state",
    "otherLane": "another lane's worktree",
    "secret": "a secret",
    "outside": "a place outside its worktree",
    "gitDir": "its worktree's git admin files, pointing or written outside it",
    "gitObjects": "the repository's shared object store",
    "signal": "a process outside its lane",
    "socket": "a socket outside its lane",
}


@dataclass(frozen=True)
class Window:
    """A lane's process ran from `start` to `end` (None: still running), in its `home` worktree."""

    lane: str
    start: float
    end: float | None = None
    home: str | None = None


@dataclass(frozen=True)
class Change:
    """A protected place that differs from its fingerprint.

    `at`: when (the file's mtime; None when unknown: then any window since the last check counts).
    `owner`: the lane whose own place it is (never blamed for it); `home`: the worktree it lies in.
    `restorable`: flowd kept what it was and can put it back."""

    path: str
    what: EscapeWhat
    at: float | None
    restorable: bool
    owner: str | None = None
    home: str | None = None


@dataclass(frozen=True)
class Blame:
    """One lane's process did it: the story fails and `action` is carried out."""

    lane: str
    action: EscapeAction


@dataclass(frozen=True)
class Unsure:
    """Several lanes ran at that instant: blame none of them (the shell reports it, puts nothing back)."""

    lanes: tuple[str, ...]
    action: EscapeAction


@dataclass(frozen=True)
class Foreign:
    """No lane ran then: the user or another program; the change becomes the new fingerprint."""


Verdict = Blame | Unsure | Foreign


def suspects(change: Change, windows: list[Window], *, since: float, now: float) -> tuple[str, ...]:
    """The lanes whose process could have made `change`, owner and own-home steps left out."""
    found: set[str] = set()
    for w in windows:
        if w.lane == change.owner or (change.home is not None and w.home == change.home):
            continue
        end = now if w.end is None else w.end
        if change.at is None:
            hit = w.start <= now and end >= since
        else:
            hit = w.start - SLACK_S <= change.at <= end + SLACK_S
        if hit:
            found.add(w.lane)
    return tuple(sorted(found))


def flowds_own(at: float | None, runs: list[tuple[float, float]]) -> bool:
    """Whether a change made at `at` lies within one of flowd's own git commands in that
    worktree (`runs`: their starts and ends): flowd's write, blamed on no lane."""
    return at is not None and any(start - SLACK_S <= at <= end + SLACK_S for start, end in runs)


def judge(change: Change, windows: list[Window], *, since: float, now: float) -> Verdict:
    lanes = suspects(change, windows, since=since, now=now)
    action: EscapeAction = "undone" if change.restorable else "reported"
    if not lanes:
        return Foreign()
    if len(lanes) == 1:
        return Blame(lanes[0], action)
    return Unsure(lanes, action)


def judge_own(
    change: Change, lane: str, windows: list[Window], *, sealed: bool, since: float, now: float
) -> Verdict:
    """A change to the git admin files of a worktree whose processes were `lane`'s (LaneEscape
    `gitDir`; flowd's own writes there are never judged). `sealed`: confinement enforces, and no
    other lane's process can write there: it is `lane`'s doing, whoever else was running. Without
    it, by when, as any change."""
    if sealed:
        return Blame(lane, "undone" if change.restorable else "reported")
    return judge(change, windows, since=since, now=now)


def sentence(lane: str, change: Change, action: EscapeAction, more: int = 0) -> str:
    """The one sentence the blamed story fails with (`more`: its other escapes, in the trace)."""
    done = {
        "undone": "flowd put it back",
        "reported": "flowd could not put it back",
        "denied": "the OS refused it",
    }[action]
    return (
        f"story '{lane}' wrote past its lane: it changed {change.path} "
        f"({WHAT_WORDS[change.what]}) while its command ran; {done} ("
        + (f"{more} more in the trace's LaneEscape events; " if more else "")
        + "docs/sandbox-detection.md)"
    )


def unsure_note(change: Change, verdict: Unsure) -> str:
    lanes = ", ".join(f"'{lane}'" for lane in verdict.lanes)
    return (
        f"{change.path} ({WHAT_WORDS[change.what]}) changed while stories {lanes} all had a command "
        "running; detection cannot tell which one (or you) did it, so it blames none and leaves it"
    )


@dataclass(frozen=True)
class Places:
    """Where the protected places are (absolute paths, resolved)."""

    checkout: str
    common_dir: str
    home: str
    flow_dir: str
    worktree_root: str


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


GIT_CONFIG_IN_HOME = (".gitconfig", ".config/git/config")


def what_of(path: str, places: Places) -> EscapeWhat:
    """The kind of place an absolute path is, most specific first."""
    common = places.common_dir
    if path == f"{common}/config" or _within(path, f"{common}/info"):
        return "gitConfig"
    if _within(path, f"{common}/hooks"):
        return "gitHooks"
    if _within(path, f"{common}/refs") or path == f"{common}/packed-refs":
        return "gitRef"
    if _within(path, f"{common}/worktrees") or _within(path, places.worktree_root):
        return "otherLane"
    if _within(path, places.flow_dir):
        return "flowState"
    if _within(path, common) or _within(path, places.checkout):
        return "checkout"
    if any(path == f"{places.home}/{name}" for name in GIT_CONFIG_IN_HOME):
        return "gitConfig"
    if _within(path, f"{places.home}/.ssh") or _within(path, f"{places.home}/.gnupg"):
        return "secret"
    if _within(path, places.home):
        return "home"
    return "outside"


PRIVATE_KEY_MARKS: tuple[bytes, ...] = (
    b"-----BEGIN OPENSSH PRIVATE KEY-----",
    b"-----BEGIN RSA PRIVATE KEY-----",
    b"-----BEGIN EC PRIVATE KEY-----",
    b"-----BEGIN DSA PRIVATE KEY-----",
    b"-----BEGIN PRIVATE KEY-----",
    b"-----BEGIN PGP PRIVATE KEY BLOCK-----",
)


def holds_secret(head: bytes) -> bool:
    """Whether a file's first bytes hold a private key (a copied `~/.ssh/id_*`, a GPG key)."""
    return any(mark in head for mark in PRIVATE_KEY_MARKS)
