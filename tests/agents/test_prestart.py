"""Prestarted clones (docs/performance.md: throughput): which clones the pool plans to start, and
real scripted-agent processes started ahead of their first turn, reused by it, ended with the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowd.agents.acp_client import AcpExecutor
from flowd.events.model import Event
from flowd.roster.pool import RosterPool
from flowd.store.config import load_roster
from flowd.trace.log import pid_alive

from .conftest import request


def _pool(repo: Path, executors: list[dict[str, object]], events: list[Event] | None = None) -> RosterPool:
    flow = repo / ".flow"
    flow.mkdir(parents=True, exist_ok=True)
    (flow / "agent.script.json").write_text(json.dumps({"rules": [{"reply": "ok"}]}))
    lines = []
    for spec in executors:
        lines.append("[[executors]]")
        lines += [f"{key} = {_toml(value)}" for key, value in spec.items()]
    (flow / "roster.toml").write_text("\n".join(lines) + "\n")
    roster = load_roster(repo, user_path=repo / "no-user-roster.toml")
    sink = events if events is not None else []
    return RosterPool(roster, state_path=flow / "roster-state.json", emit=sink.append, log_dir=repo / "logs")


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def _spec(ident: str, roles: list[str], slots: int, **extra: object) -> dict[str, object]:
    return {
        "id": ident,
        "kind": "script",
        "script": "agent.script.json",
        "roles": roles,
        "slots": slots,
        **extra,
    }


ALL = ["planner", "coder", "reviewer", "judge"]


@pytest.mark.parametrize(
    ("executors", "role", "count", "expected"),
    [
        # one executor: the lowest clone numbers, as leases take them
        ([_spec("a", ALL, 3)], "coder", 2, [("a", 1), ("a", 2)]),
        # never more than the slots
        ([_spec("a", ALL, 2)], "planner", 5, [("a", 1), ("a", 2)]),
        # equal priority: round robin in roster order, as `lease` alternates
        ([_spec("a", ALL, 2), _spec("b", ALL, 2)], "coder", 3, [("a", 1), ("b", 1), ("a", 2)]),
        # a role the executor does not serve plans nothing
        ([_spec("a", ["reviewer"], 2)], "coder", 2, []),
        # coder slots bound the coder clones
        (
            [_spec("a", ALL, 3, coderSlots=1), _spec("b", ["coder"], 2)],
            "coder",
            3,
            [("a", 1), ("b", 1), ("b", 2)],
        ),
        # a better priority for the role fills first
        (
            [_spec("a", ALL, 2), _spec("b", ALL, 2, priority={"planner": -1})],
            "planner",
            3,
            [("b", 1), ("b", 2), ("a", 1)],
        ),
    ],
)
def test_planned_clones_follow_the_leasing_order(
    tmp_path: Path,
    executors: list[dict[str, object]],
    role: str,
    count: int,
    expected: list[tuple[str, int]],
) -> None:
    events: list[Event] = []
    pool = _pool(tmp_path, executors, events)
    free = pool.free_slots(role)
    assert pool.planned_clones(role, count) == expected
    assert (pool.free_slots(role), events) == (free, [])  # planning leases nothing


async def test_prestarted_clones_run_their_first_turn_on_the_started_process_and_end_with_the_pool(
    tmp_path: Path, worktree: Path
) -> None:
    repo = tmp_path / "pool"
    pool = _pool(repo, [_spec("helpers", ["planner", "reviewer"], 2), _spec("coders", ["coder"], 2)])
    pool.prestart({"coder": 1, "planner": 2}, repo)
    await pool.warmed()
    started = {key: ex for key, ex in pool._executors.items() if isinstance(ex, AcpExecutor)}
    assert sorted(started) == [("coders", 1), ("helpers", 1), ("helpers", 2)]
    pids = {key: ex.pid for key, ex in started.items()}
    assert all(pid is not None and pid_alive(pid) for pid in pids.values())
    try:
        result, info = await pool.run("coder", request(worktree))
        assert result.text == "ok"
        assert (info.executor, info.clone) == ("coders", 1)
        assert started["coders", 1].pid == pids["coders", 1]  # the warm process took the turn
    finally:
        await pool.aclose()
    assert not any(pid_alive(pid) for pid in pids.values() if pid is not None)


@pytest.mark.slow
async def test_a_clone_that_fails_to_prestart_reports_at_its_first_turn_as_before(
    tmp_path: Path, worktree: Path
) -> None:
    repo = tmp_path / "pool"
    pool = _pool(
        repo, [{"id": "gone", "kind": "acp", "command": ["/bin/sh", "-c", "exit 3"], "roles": ["coder"]}]
    )
    pool.prestart({"coder": 1}, repo)
    await pool.warmed()
    executor = pool._executors["gone", 1]
    assert isinstance(executor, AcpExecutor) and executor.pid is None
    try:
        with pytest.raises(Exception, match="did not start"):
            await pool.run("coder", request(worktree))
    finally:
        await pool.aclose()
