"""A node's side of Ray lanes without Ray (docs/scale-out.md): `NodeHost` runs two story lanes side
by side from a bare remote, with the scripted agent, real git and real gates. Its one roster pool
keeps agent clones across lanes: two lanes at once lease different clones, so their agents' logs
are different files, and a lane placed after them starts no agent of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from flowd.engine.core.outcome import StoryOutcome
from flowd.engine.lanes.node import HostSpec, NodeHost
from flowd.engine.lanes.node_lane import LaneMessage, LaneSpec
from flowd.events.model import Event, ExecutorLeased
from flowd.plan.parse import load_plan
from flowd.store.config import load_roster, load_settings
from tests.engine.scenario import Scenario, coder, git, story


async def _lane(host: NodeHost, spec: LaneSpec) -> list[LaneMessage]:
    return [message async for batch in host.stream(spec) for message in batch]


def _events(messages: list[LaneMessage]) -> list[Event]:
    return [body for kind, body, _ in messages if kind == "event"]  # type: ignore[misc]


def _outcome(messages: list[LaneMessage]) -> StoryOutcome:
    kind, body, _ = messages[-1]
    assert kind == "outcome" and isinstance(body, StoryOutcome)
    return body


@pytest.mark.timeout(180)
async def test_lanes_on_one_node_share_its_warm_agents_each_with_its_own_clone_and_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWD_LANE_CACHE", str(tmp_path / "lanes"))
    rules = [coder(s, {f"{s}/x.txt": f"{s}\n"}, delayMs=800) for s in ("a", "b", "c")]
    stories = [story(s, [f"{s}/"]) for s in ("a", "b", "c")]
    settings_text = 'gates = ["true"]\njudgeRounds = 0\nmaxReviewRounds = 1\n'
    executors = [{"id": "demo", "script": "script.json", "slots": 2}]
    sc = Scenario.create(tmp_path, stories, rules, settings=settings_text, executors=executors)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(sc.repo, "push", "-q", str(bare), "main:refs/heads/epic/ep")
    roster, settings, plan = load_roster(sc.repo), load_settings(sc.repo), load_plan(sc.plan_path)
    script = sc.repo / ".flow" / "script.json"
    host = NodeHost(
        HostSpec(run_id="r1", epic="ep", remote=str(bare), roster=roster,
                 scripts={"demo": (script.name, script.read_text(encoding="utf-8"))}, settings=settings,
                 prestart=2),
        "node0123456789abcdef",
    )  # fmt: skip

    def spec(sid: str) -> LaneSpec:
        return LaneSpec(run_id="r1", plan=plan, story=sid, settings=settings, remote=str(bare))

    try:
        await host.warm()
        first = await asyncio.gather(_lane(host, spec("a")), _lane(host, spec("b")))
        third = await _lane(host, spec("c"))
        pool = host.pool()
        started = set(pool._executors)  # the agent connections the pool ever opened
    finally:
        await host.aclose()
    assert [_outcome(m).status for m in (*first, third)] == ["done", "done", "done"]
    coders = {
        e.label: e.clone
        for m in (*first, third)
        for e in _events(m)
        if isinstance(e, ExecutorLeased) and e.role == "coder"
    }
    assert coders["a"] != coders["b"]  # side by side: two clones, never one agent for two lanes
    assert started == {("demo", 1), ("demo", 2)}  # the third lane took a warm clone
    logs = sorted(p.name for p in host.paths.agent_logs().iterdir())
    assert logs == ["demo-1.stderr.log", "demo-2.stderr.log"]
    for sid in ("a", "b", "c"):  # each lane pushed its branch, ready for the runner's merge
        assert git(bare, "ls-tree", "-r", "--name-only", f"story/ep/{sid}").split().count(f"{sid}/x.txt") == 1


def test_a_half_made_node_clone_is_cloned_again_not_taken_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host ended while cloning (its driver killed) left `.git` without its config; the next
    run's host clones anew, whole, beside it and drops the dead partial one."""
    monkeypatch.setenv("FLOWD_LANE_CACHE", str(tmp_path / "lanes"))
    sc = Scenario.create(tmp_path, [story("a", ["a/"])], [coder("a", {"a/x.txt": "x\n"})])
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(sc.repo, "push", "-q", str(bare), "main:refs/heads/main")
    spec = HostSpec(run_id="r1", epic="ep", remote=str(bare), roster=load_roster(sc.repo),
                    scripts={}, settings=load_settings(sc.repo))  # fmt: skip
    host = NodeHost(spec, "node0123456789abcdef")
    (host.clone / ".git" / "objects").mkdir(parents=True)  # what `git clone` makes before its config
    dead = host.clone.parent / "repo.partial-1"
    (dead / ".git").mkdir(parents=True)
    repo = host.ensure_clone()
    assert git(repo.root, "rev-parse", "origin/main") == git(sc.repo, "rev-parse", "main")
    assert sorted(p.name for p in host.clone.parent.iterdir() if p.name.startswith("repo")) == ["repo"]
