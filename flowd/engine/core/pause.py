"""Pause and ask instead of halt (docs/answers.md): when a story or the run waits on a person,
what it asks, and what each answer does. No I/O: the shell asks, the desk reads answers with these.

Three reasons, each opted into with `pauseOn` (`.flow/config.toml`, `flowd run --pause-on`,
`flow.launchEpic {pauseOn}`):

- `budget`: the epic budget is spent (the whole run waits) or a story's own budget is (that story
  waits). `raise N` adds N USD to that budget and goes on; `stop` halts as without `pauseOn`.
- `blocked`: the coder answered `BLOCKED_ON`. Free text goes to the coder in the story's next
  prompt and the story resumes its task; `stop` leaves it waiting as without `pauseOn`.
- `noExecutor`: no executor can serve a role any more. `wait` takes back the executors excluded
  for the run and tries again; `stop` halts as without `pauseOn`.
- `merge`: a story whose work is done waits `ready` for approval before it merges; what its
  answers mean is engine/core/approval.py's (`approve`, or changes for its coder).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from flowd.engine.core import approval

PauseReason = Literal["budget", "blocked", "noExecutor", "merge"]
PAUSE_REASONS: tuple[PauseReason, ...] = ("budget", "blocked", "noExecutor", "merge")


class AnswerRefused(ValueError):
    """An answer that does not fit the pause: `str(exc)` is the sentence to show."""


def parse_pause_on(text: str, where: str = "--pause-on") -> list[PauseReason]:
    """`budget,blocked` → the reasons; an unknown one is a sentence naming `where`."""
    out: list[PauseReason] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part not in PAUSE_REASONS:
            raise AnswerRefused(f"{where}: {part!r} is not one of {', '.join(PAUSE_REASONS)}")
        if part not in out:
            out.append(part)
    return out


def pauses(reason: PauseReason, pause_on: frozenset[str] | set[str] | list[str]) -> bool:
    """Whether `reason` waits for a person (else today's halt or wait)."""
    return reason in pause_on


@dataclass(frozen=True)
class Question:
    question: str
    options: list[str]


def question_for(reason: PauseReason, story: str | None, detail: str) -> Question:
    """What the pause asks, and the answers it offers (free text is always possible for `blocked`)."""
    who = f"story {story}" if story is not None else "the run"
    if reason == "merge":
        asked, options = approval.question(story or "?", detail)
        return Question(asked, options)
    if reason == "budget":
        return Question(
            f"{detail[:1].upper()}{detail[1:]}: raise it and go on, or stop {who}?", ["raise 5", "stop"]
        )
    if reason == "blocked":
        return Question(
            f"Story {story} is {detail}. What should its coder know? (free text goes to the coder; "
            "`stop` leaves the story waiting)",
            ["stop"],
        )
    return Question(
        f"{who[:1].upper()}{who[1:]} has no executor: {detail}. Fix the roster or the agent, then "
        "`wait` to try again, or `stop`",
        ["wait", "stop"],
    )


# -- what an answer does --------------------------------------------------------------------------


@dataclass(frozen=True)
class Raise:
    usd: float


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Tell:
    text: str


@dataclass(frozen=True)
class Wait:
    pass


Decision = Raise | Stop | Tell | Wait

_RAISE = re.compile(r"^raise\s+\$?(\S+)$", re.IGNORECASE)


def read_answer(reason: PauseReason, text: str) -> Decision:
    """The decision `text` makes for a pause of `reason`; AnswerRefused with a sentence otherwise."""
    answer = text.strip()
    word = answer.lower()
    if word == "stop":
        return Stop()
    if reason == "budget":
        match = _RAISE.match(answer)
        if match is None:
            raise AnswerRefused(
                f"a budget pause takes `raise N` (USD to add, e.g. `raise 5`) or `stop`, not {answer!r}"
            )
        try:
            usd = float(match.group(1))
        except ValueError:
            usd = math.nan
        if not math.isfinite(usd) or usd <= 0:
            raise AnswerRefused(
                f"`raise` takes a positive number of USD (e.g. `raise 5`), not {match.group(1)!r}"
            )
        return Raise(usd)
    if reason == "blocked":
        if not answer:
            raise AnswerRefused(
                "a blocked story takes the text its coder needs, or `stop`; the answer was empty"
            )
        return Tell(answer)
    if word == "wait":
        return Wait()
    raise AnswerRefused(f"a story with no executor takes `wait` or `stop`, not {answer!r}")


def goes_on(decision: Decision) -> bool:
    """Whether the paused story (or run) continues after `decision`."""
    return not isinstance(decision, Stop)
