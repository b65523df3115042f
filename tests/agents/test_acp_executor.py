"""The ACP executor driving the bundled scripted agent: real processes, a real git worktree."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from acp import RequestError

from flowd.agents.acp_client import AcpExecutor
from flowd.agents.base import AgentError, ToolCall
from flowd.sandbox.confine import Confinement
from flowd.trace.log import pid_alive

from .conftest import request


async def test_turn_writes_files_and_returns_reply_usage_and_tool_calls(
    worktree: Path, tmp_path: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {
                "when": {"role": "coder", "story": "api", "task": "login"},
                "writes": {"src/api/login.py": "def login(): ...\n"},
                "deletes": ["README.md"],
                "run": ["echo ran > ran.txt", "echo into-the-log"],
                "reply": "wrote the login endpoint",
                "usage": {
                    "input": 1200,
                    "output": 300,
                    "cachedRead": 800,
                    "cacheWrite": 100,
                    "costUsd": 0.012,
                },
            }
        ]
    )
    executor = executors(script)
    seen: list[ToolCall | str] = []
    result = await executor.run_turn(request(worktree), seen.append)

    assert (worktree / "src/api/login.py").read_text() == "def login(): ...\n"
    assert not (worktree / "README.md").exists()
    assert (worktree / "ran.txt").read_text() == "ran\n"
    assert result.text == "wrote the login endpoint"
    assert result.usage is not None
    assert (result.usage.input, result.usage.output) == (1200, 300)
    assert (result.usage.cached_read, result.usage.cache_write) == (800, 100)
    assert result.usage.cost_usd == 0.012
    assert result.model == "scripted"
    tools = [item.tool for item in seen if isinstance(item, ToolCall)]
    assert tools == [
        "Write src/api/login.py",
        "Delete README.md",
        "Run echo ran > ran.txt",
        "Run echo into-the-log",
    ]
    assert [call.tool for call in result.tool_calls] == tools
    assert "".join(item for item in seen if isinstance(item, str)) == result.text
    assert result.refusals == []
    pid = executor.pid
    assert pid is not None
    await executor.close()
    assert executor.pid is None
    assert not _alive(pid)
    # A command's output never reaches the ACP channel: it is in the agent's stderr log.
    assert "into-the-log" in (tmp_path / "logs" / "demo#1.log").read_text()


def _alive(pid: int) -> bool:
    return pid_alive(pid)  # a zombie awaiting its reaper counts as gone


async def test_cumulative_cost_becomes_per_turn_delta_in_one_session(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {"times": 1, "reply": "one", "usage": {"input": 10, "output": 5, "costUsd": 0.01}},
            {"reply": "two", "usage": {"input": 20, "output": 7, "costUsd": 0.025}},
        ]
    )
    executor = executors(script)
    first = await executor.run_turn(request(worktree))
    pid = executor.pid
    second = await executor.run_turn(request(worktree))
    assert executor.pid == pid  # one process, one session: the agent's cost figure is cumulative
    assert first.usage is not None and second.usage is not None
    assert (first.text, first.usage.cost_usd) == ("one", 0.01)
    assert (second.text, second.usage.cost_usd) == ("two", 0.025)
    assert (second.usage.input, second.usage.output) == (20, 7)


async def test_meta_reaches_the_agent_and_defaults_answer_unmatched_roles(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {"when": {"role": "coder", "story": "api", "task": "^Add"}, "reply": "coder on api, Add task"},
            {"when": {"role": "coder", "story": "web"}, "reply": "coder on web"},
            {"when": {"role": "reviewer", "prompt": "look\\s+closely"}, "reply": "careful review"},
        ]
    )
    executor = executors(script)

    async def reply(**kwargs: object) -> str:
        return (await executor.run_turn(request(worktree, **kwargs))).text  # type: ignore[arg-type]

    assert await reply() == "coder on api, Add task"
    assert await reply(task="Fix the login") == "Nothing to change.\nTASK_ALREADY_SATISFIED"
    assert await reply(story="web", task="Fix") == "coder on web"
    assert await reply(role="reviewer", prompt="please look  closely") == "careful review"
    assert json.loads(await reply(role="reviewer")) == {"issues": [], "summary": "ok"}
    assert json.loads(await reply(role="judge")) == {"issues": [], "summary": "ok"}
    plan = json.loads(await reply(role="planner", task=None))
    assert [task["title"] for task in plan["tasks"]] == ["api"]


async def test_times_is_shared_by_every_process_of_a_run_and_resets_for_another_run(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script([{"times": 1, "reply": "first"}, {"reply": "later"}])
    clone1, clone2 = executors(script, "demo#1"), executors(script, "demo#2")
    assert (await clone1.run_turn(request(worktree, run_id="run-a"))).text == "first"
    assert (await clone2.run_turn(request(worktree, run_id="run-a"))).text == "later"
    assert clone1.pid != clone2.pid
    await clone1.close()
    restarted = executors(script, "demo#1")  # a new process still remembers the run
    assert (await restarted.run_turn(request(worktree, run_id="run-a"))).text == "later"
    assert (await clone2.run_turn(request(worktree, run_id="run-b"))).text == "first"


async def test_fail_modes_surface_as_typed_agent_errors(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {"when": {"prompt": "rate"}, "fail": "rate_limit"},
            {"when": {"prompt": "usage"}, "fail": "usage_limit"},
            {"when": {"prompt": "auth"}, "fail": "auth"},
            {"when": {"prompt": "error"}, "fail": "error", "reply": "the scripted tool blew up"},
        ]
    )
    executor = executors(script)
    kinds: dict[str, AgentError] = {}
    for name in ("rate", "usage", "auth", "error"):
        with pytest.raises(AgentError) as caught:
            await executor.run_turn(request(worktree, prompt=name))
        kinds[name] = caught.value
    assert {name: err.kind for name, err in kinds.items()} == {
        "rate": "rate_limit",
        "usage": "usage_limit",
        "auth": "auth",
        "error": "error",
    }
    assert "rate limit exceeded" in kinds["rate"].message
    assert "not logged in" in kinds["auth"].message.lower()
    assert "the scripted tool blew up" in kinds["error"].message
    reset = kinds["usage"].reset_at
    assert reset is not None
    assert timedelta(minutes=55) < reset - datetime.now(UTC) <= timedelta(hours=1, minutes=1)
    # Errors answered over JSON-RPC leave the agent running for the next turn.
    assert (await executor.run_turn(request(worktree, prompt="fine"))).stop_reason == "end_turn"


async def test_crashed_agent_fails_the_turn_and_restarts_on_the_next(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {"times": 1, "writes": {"partial.txt": "half\n"}, "fail": "crash"},
            {"reply": "back again"},
        ]
    )
    executor = executors(script)
    with pytest.raises(AgentError) as caught:
        await executor.run_turn(request(worktree))
    assert caught.value.kind == "crash"
    assert (worktree / "partial.txt").exists()  # what it did before dying stays for the engine to judge
    assert executor.pid is None
    result = await executor.run_turn(request(worktree))
    assert result.text == "back again"


async def test_hung_agent_stalls_or_times_out_and_is_killed(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script([{"when": {"prompt": "hang"}, "fail": "hang"}, {"reply": "alive"}])
    executor = executors(script)
    await executor.run_turn(request(worktree))  # warm: the process is up before the short clocks start
    pid = executor.pid
    assert pid is not None
    with pytest.raises(AgentError) as caught:
        await executor.run_turn(request(worktree, prompt="hang", stall_timeout_s=1.0))
    assert caught.value.kind == "stall"
    assert not _alive(pid)
    await executor.run_turn(request(worktree))
    with pytest.raises(AgentError) as caught:
        await executor.run_turn(request(worktree, prompt="hang", turn_timeout_s=1.0))
    assert caught.value.kind == "timeout"
    assert (await executor.run_turn(request(worktree))).text == "alive"


async def test_cancel_ends_a_turn_the_agent_ignores_and_kills_what_it_started(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script([{"run": ["sleep 60 & echo $! > bg.pid"], "fail": "hang"}])
    executor = executors(script, cancel_grace_s=0.5)
    started = asyncio.Event()

    def observe(item: ToolCall | str) -> None:
        if isinstance(item, ToolCall):
            started.set()

    turn = asyncio.create_task(executor.run_turn(request(worktree), observe))
    await started.wait()
    while not (worktree / "bg.pid").exists() or not (worktree / "bg.pid").read_text().strip():
        await asyncio.sleep(0.05)  # the command runs after its tool call is announced
    pid = executor.pid
    assert pid is not None
    await executor.cancel()
    with pytest.raises(AgentError) as caught:
        await turn
    assert caught.value.kind == "cancelled"
    assert not _alive(pid)
    assert not _alive(int((worktree / "bg.pid").read_text()))


async def test_permission_outside_the_worktree_is_refused_and_recorded(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script([{"writes": {"inside.txt": "ok\n", "../outside.txt": "no\n"}, "reply": "done"}])
    executor = executors(script)
    result = await executor.run_turn(request(worktree))
    assert (worktree / "inside.txt").read_text() == "ok\n"
    assert not (worktree.parent / "outside.txt").exists()
    assert len(result.refusals) == 1
    outside = worktree.parent / "outside.txt"
    assert (
        result.refusals[0] == f"Write ../outside.txt: {outside} is outside the working directory {worktree}"
    )
    assert "permission refused" in result.text


async def test_a_new_working_directory_opens_a_new_session(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    other = worktree.parent / "web"
    subprocess.run(
        ["git", "worktree", "add", "-q", "-b", "story/epic/web", str(other)], cwd=worktree, check=True
    )
    script = write_script(
        [{"writes": {"here.txt": "x\n"}, "usage": {"input": 1, "output": 1, "costUsd": 0.5}}]
    )
    executor = executors(script)
    first = await executor.run_turn(request(worktree))
    pid = executor.pid
    second = await executor.run_turn(request(other, story="web"))
    assert executor.pid == pid
    assert (worktree / "here.txt").exists() and (other / "here.txt").exists()
    # Each session counts its cost from zero, so both turns cost what the script says.
    assert first.usage is not None and second.usage is not None
    assert first.usage.cost_usd == second.usage.cost_usd == 0.5


async def test_an_agent_that_cannot_start_is_unavailable(
    worktree: Path, tmp_path: Path, executors: Callable[..., AcpExecutor]
) -> None:
    broken = tmp_path / "broken.script.json"
    broken.write_text("{not json")
    with pytest.raises(AgentError) as caught:
        await executors(broken).run_turn(request(worktree))
    assert caught.value.kind == "unavailable"
    assert "broken.script.json" in caught.value.message
    missing = AcpExecutor(label="ghost#1", command=[str(tmp_path / "no-such-agent")])
    with pytest.raises(AgentError) as caught:
        await missing.run_turn(request(worktree))
    assert caught.value.kind == "unavailable"
    await missing.close()


async def test_cancel_during_a_delay_gets_a_cancelled_answer_and_keeps_the_agent(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script([{"when": {"prompt": "slow"}, "delayMs": 60000}, {"reply": "quick"}])
    executor = executors(script)
    await executor.run_turn(request(worktree))
    pid = executor.pid
    turn = asyncio.create_task(executor.run_turn(request(worktree, prompt="slow")))
    while executor._turn is None:  # the turn is in flight once its session is settled
        await asyncio.sleep(0.01)
    await executor.cancel()
    with pytest.raises(AgentError) as caught:
        await turn
    assert caught.value.kind == "cancelled"
    assert executor.pid == pid  # it answered `cancelled`, so it did not need killing
    assert (await executor.run_turn(request(worktree))).text == "quick"


async def test_a_missing_working_directory_is_not_the_agents_fault(
    tmp_path: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    executor = executors(write_script([]))
    with pytest.raises(AgentError) as caught:
        await executor.run_turn(request(tmp_path / "gone"))
    assert caught.value.kind == "error"
    assert executor.pid is None


async def test_fs_callbacks_serve_the_working_directory_only(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    executor = executors(write_script([]))
    await executor.run_turn(request(worktree))
    assert executor._session is not None
    session_id = executor._session[1]
    client = executor._client
    await client.write_text_file(session_id, str(worktree / "notes" / "a.txt"), "one\ntwo\nthree\n")
    assert (worktree / "notes" / "a.txt").read_text() == "one\ntwo\nthree\n"
    read = await client.read_text_file(session_id, str(worktree / "notes" / "a.txt"), line=2, limit=1)
    assert read.content == "two\n"
    for path in (str(worktree.parent / "x.txt"), str(worktree / ".." / "x.txt"), "relative.txt"):
        with pytest.raises(RequestError):
            await client.write_text_file(session_id, path, "no")
    assert not (worktree.parent / "x.txt").exists()
    with pytest.raises(RequestError) as caught:
        await client.read_text_file(session_id, str(worktree / "missing.txt"))
    assert caught.value.code == -32002


def _enforcing(tmp_path: Path) -> Confinement:
    """The `worktree` fixture's repository confined as a run confines it (the kernel's Landlock)."""
    from flowd.sandbox import landlock

    assert landlock.abi() >= 2, "this test needs the kernel's Landlock"
    repo = tmp_path / "repo"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return Confinement(
        "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=tmp_path / "repo.flowd",
        epic="epic", home=home,
    )  # fmt: skip


async def test_a_confined_agent_never_serves_a_reused_worktree_and_leaves_it_when_asked(
    worktree: Path, tmp_path: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    """docs/repositories.md "Worktree reuse": a lane's worktree handed to the next story under its
    name is another confinement key, so the agent confined to the old lane is restarted for the
    new one; and `leave_lane` stops an idle agent confined to a worktree about to be handed on."""
    from flowd.engine.spares import Spares
    from flowd.sandbox.confine import active
    from flowd.vcs.gitops import Repo

    repo = Repo(tmp_path / "repo")
    confinement = _enforcing(tmp_path)
    script = write_script([{"writes": {"here.txt": "x\n"}, "reply": "ok"}])
    executor = executors(script)
    with active(confinement):
        await executor.run_turn(request(worktree))
        first = executor.pid
        assert first is not None and (worktree / "here.txt").exists()
        (worktree / "here.txt").unlink()
        spares = Spares(repo, worktree.parent)
        assert await executor.leave_lane(worktree.parent / "web") is False  # another lane's: kept
        assert executor.pid == first
        assert spares.give(worktree) is None
        web = worktree.parent / "web"
        assert spares.take(web, "story/epic/web", "main") == "reused"
        await executor.run_turn(request(web, story="web"))
        second = executor.pid
        assert second is not None and second != first and not pid_alive(first)
        assert (web / "here.txt").exists()
        assert await executor.leave_lane(web) is True
        assert executor.pid is None and not pid_alive(second)


async def test_a_warm_start_for_a_lane_replaces_an_idle_agent_confined_to_another(
    worktree: Path, tmp_path: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    """docs/performance.md "Throughput": a story's coder clone is warmed for its lane while the
    story plans. An idle agent confined to another lane is replaced by one confined to this lane,
    whose first turn then runs in it without another start; a warm for the lane it already serves
    starts nothing."""
    from flowd.sandbox.confine import active

    web = worktree.parent / "web"
    subprocess.run(
        ["git", "worktree", "add", "-q", "-b", "story/epic/web", str(web)], cwd=tmp_path / "repo", check=True
    )
    confinement = _enforcing(tmp_path)
    script = write_script([{"writes": {"here.txt": "x\n"}, "reply": "ok"}])
    executor = executors(script)
    with active(confinement):
        await executor.run_turn(request(worktree))
        first = executor.pid
        assert first is not None
        await executor.warm(worktree)  # the lane it serves: kept
        assert executor.pid == first
        await executor.warm(web)
        second = executor.pid
        assert second is not None and second != first and not pid_alive(first)
        await executor.run_turn(request(web, story="web"))
        assert executor.pid == second and (web / "here.txt").exists()
