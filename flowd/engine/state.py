"""Durable per-epic state: story state files, the task checkpoint path, the epic lock.

`.flow/epics/<epicId>/stories/<storyId>.json` says where a story is (started, merged, failed) and
the hash of the plan entry its branch was created from; that and the task checkpoint are all a
resumed run needs. Every write is atomic.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from flowd.base import layout
from flowd.base.errors import InputError
from flowd.base.fsio import write_model_atomic, write_text_atomic
from flowd.base.wire import WireModel, describe_validation_error
from flowd.events.statuses import StoryFileStatus
from flowd.trace.log import pid_alive


class StoryState(WireModel):
    id: str
    hash: str
    branch: str
    worktree: str
    status: StoryFileStatus
    executor: str | None = None
    # Beyond the fields every reader needs: the commit the branch started from (tells a branch with work
    # from a fresh one when deciding whether it was merged before a kill) and the last failure.
    base: str | None = None
    reason: str | None = None
    # How many tasks (all done) a person approved the story's merge with (docs/answers.md: `merge`).
    approved: int | None = None


@dataclass(frozen=True)
class EpicPaths:
    repo: Path
    epic_id: str

    @property
    def root(self) -> Path:
        return self.repo / layout.epic_state(self.epic_id)

    @property
    def stories(self) -> Path:
        return self.repo / layout.epic_stories(self.epic_id)

    def state(self, story_id: str) -> Path:
        return self.stories / f"{story_id}.json"

    def checkpoint(self, story_id: str) -> Path:
        return self.stories / f"{story_id}.plan.md"

    def findings(self, story_id: str) -> Path:
        return self.repo / layout.story_findings(self.epic_id, story_id)

    def answers(self, story_id: str) -> Path:
        return self.repo / layout.story_answers(self.epic_id, story_id)

    def gate_logs(self, story_id: str) -> Path:
        return self.stories / story_id / "gates"

    def agent_logs(self) -> Path:
        return self.root / "agents"

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def merging(self) -> Path:
        return self.root / "merging.json"

    @property
    def report_json(self) -> Path:
        return self.repo / layout.report_json(self.epic_id)

    @property
    def report_md(self) -> Path:
        return self.repo / layout.report_markdown(self.epic_id)


class MergeIntent(WireModel):
    """`merging.json`: a merge into the epic under way and not yet verified by the epic gates.

    Only flowd before the merge train wrote it (merging in the epic worktree itself); the train
    merges on candidates and moves the epic branch only to a gated one (docs/merging.md), so it
    writes none. A run killed under an older flowd may still have left one: the next run reads it
    and undoes that ungated merge.
    """

    story: str
    branch: str
    checkpoint: str  # the epic head before the merge


def load_intent(paths: EpicPaths) -> MergeIntent | None:
    try:
        return MergeIntent.model_validate_json(paths.merging.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as exc:
        raise InputError(
            f"{paths.merging}: unreadable ({_reason(exc)}); check the epic branch's last merge, then delete the file"
        )


def _reason(exc: Exception) -> str:
    """Why a state file could not be read, in a few words: the first field pydantic rejected (not
    its multi-line report with links), or the OS's or JSON parser's one-line message."""
    if isinstance(exc, ValidationError):
        problems = describe_validation_error(exc)
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        return f"{problems[0]}{more}" if problems else "not a state file"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def clear_intent(paths: EpicPaths) -> None:
    with contextlib.suppress(FileNotFoundError):
        paths.merging.unlink()


def load_state(paths: EpicPaths, story_id: str) -> StoryState | None:
    path = paths.state(story_id)
    try:
        return StoryState.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as exc:
        raise InputError(
            f"{path}: unreadable story state ({_reason(exc)}); delete it to start the story over"
        )


def save_state(paths: EpicPaths, state: StoryState) -> None:
    write_model_atomic(paths.state(state.id), state)


def all_states(paths: EpicPaths) -> list[StoryState]:
    if not paths.stories.is_dir():
        return []
    out: list[StoryState] = []
    for file in sorted(paths.stories.glob("*.json")):
        with contextlib.suppress(OSError, ValidationError, ValueError):
            out.append(StoryState.model_validate_json(file.read_bytes()))
    return out


class EpicLock:
    """One run per epic: `.flow/epics/<epicId>/lock` holds `<runId> <pid>` while a run is active.

    A lock whose pid is gone (a killed run) is stale and taken over.
    """

    def __init__(self, paths: EpicPaths) -> None:
        self.path = paths.lock
        self.held = False

    def holder(self) -> tuple[str, int] | None:
        try:
            run_id, pid = self.path.read_text(encoding="utf-8").split()
            return run_id, int(pid)
        except (OSError, ValueError):
            return None

    def acquire(self, run_id: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self.holder()
                if holder is not None and pid_alive(holder[1]) and holder[1] != os.getpid():
                    raise InputError(
                        f"epic {self.path.parent.name!r} is already running as run {holder[0]} "
                        f"(pid {holder[1]}); cancel it with `flowd cancel {holder[0]}` or wait for it"
                    )
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"{run_id} {os.getpid()}\n")
            self.held = True
            return
        raise InputError(f"{self.path}: could not take the epic lock; remove the file if no run is active")

    def release(self) -> None:
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = False


def append_findings(paths: EpicPaths, story_id: str, text: str) -> None:
    """The story's human log of review and judge findings (append-only; rewritten atomically)."""
    path = paths.findings(story_id)
    try:
        previous = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        previous = f"# Findings: {story_id}\n"
    write_text_atomic(path, previous.rstrip("\n") + "\n\n" + text.strip() + "\n")
