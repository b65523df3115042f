"""The gate retry rule as a table: one run's result → rerun, passed (flaky or not) or failed."""

from __future__ import annotations

import pytest

from flowd.engine.core.flaky import Failed, GateNext, Passed, Rerun, after_gate_run


@pytest.mark.parametrize(
    ("ok", "red_before", "retries", "timed_out", "expected"),
    [
        (True, 0, 1, False, Passed(0)),  # green at once: not flaky
        (True, 1, 1, False, Passed(1)),  # green on the rerun: flaky, one red run before
        (True, 2, 3, False, Passed(2)),
        (False, 0, 1, False, Rerun()),  # red, a retry left
        (False, 1, 1, False, Failed(2)),  # red on the rerun too: red for good
        (False, 0, 0, False, Failed(1)),  # gateRetries = 0: red at once, as before retries
        (False, 1, 3, False, Rerun()),
        (False, 3, 3, False, Failed(4)),
        (False, 0, 2, True, Failed(1)),  # a timeout is not rerun
    ],
)
def test_after_gate_run(ok: bool, red_before: int, retries: int, timed_out: bool, expected: GateNext) -> None:
    assert after_gate_run(ok, red_before, retries, timed_out=timed_out) == expected


def test_flaky_means_red_before_green() -> None:
    assert Passed(1).flaky and not Passed(0).flaky
