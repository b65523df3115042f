"""Gate retries: whether a red gate runs again, and what a green rerun means (docs/revisions.md).

A red gate is run again up to `gateRetries` times. Green on a rerun is *flaky*: the gate passes,
`GateFlaky` records how many red runs came before the green one, and nothing is charged to the
story (no fix round, no merge revision, no failure). A gate that timed out is not rerun: a hang
costs `gateTimeoutS` on every attempt, and a rerun would mostly double the wait.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rerun:
    """Run the same gate again."""


@dataclass(frozen=True)
class Passed:
    """The gate is green; `red_runs` > 0 means it was flaky (red that many times first)."""

    red_runs: int = 0

    @property
    def flaky(self) -> bool:
        return self.red_runs > 0


@dataclass(frozen=True)
class Failed:
    """The gate is red for good after `runs` runs."""

    runs: int


GateNext = Rerun | Passed | Failed


def after_gate_run(ok: bool, red_before: int, retries: int, *, timed_out: bool = False) -> GateNext:
    """What follows one run of a gate that was red `red_before` times already in this check."""
    if ok:
        return Passed(red_before)
    red = red_before + 1
    if timed_out or red > retries:
        return Failed(red)
    return Rerun()
