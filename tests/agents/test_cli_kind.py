"""The cli kind against a fixture-replaying executable (the model boundary stand-in).

`tests/fixtures/agents/replay.py` prints recorded claude/codex JSON lines and exits with a given
code; the spawning, stdin, env, parsing, classification and killing under test are real.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flowd.agents.base import AgentError, FlowdMeta, ToolCall, TurnRequest
from flowd.agents.cli_kind import CliExecutor, CliTurn, build_argv, fold_line
from flowd.store.config import ExecutorSpec
from flowd.trace.log import pid_alive  # a zombie (killed, not yet reaped by init) is not running

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
REPLAY = FIXTURES / "replay.py"


def spec(fixture: str, *extra: str, env: dict[str, str] | None = None) -> ExecutorSpec:
    s = ExecutorSpec(
        id="cli",
        kind="cli",
        command=[sys.executable, str(REPLAY), str(FIXTURES / fixture), *extra],
        model="m0",
    )
    s._resolved_env = env or {}
    return s


def turn(
    cwd: Path, prompt: str = "Add login.", *, stall: float = 60.0, timeout: float = 120.0
) -> TurnRequest:
    return TurnRequest(
        role="coder",
        prompt=prompt,
        cwd=cwd,
        meta=FlowdMeta(role="coder", run_id="r1", epic_id="auth", story="api", task="Add login"),
        turn_timeout_s=timeout,
        stall_timeout_s=stall,
    )


async def test_claude_stream_gives_text_tools_and_usage_with_cache_and_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWD_TEST_SECRET", "not for agents")  # only the roster's env reaches them
    record = tmp_path / "seen.json"
    executor = CliExecutor(
        spec("claude_success.jsonl", "--record", str(record), env={"FLOWD_TEST_KEY": "k1"}), clone=2
    )
    seen: list[ToolCall | str] = []
    result = await executor.run_turn(turn(tmp_path), observe=seen.append)
    assert result.text == "Added `login()` in src/api/login.py."
    assert [c.tool for c in result.tool_calls] == ["Bash", "Task", "Grep", "Write"]
    assert result.tool_calls[2].parent == "toolu_01Y" and result.tool_calls[0].args == {
        "command": "ls src/api",
        "description": "List the API package",
    }
    usage = result.usage
    assert usage is not None
    # modelUsage summed over both models (the sub-agent's haiku included); input counts the cache.
    assert (usage.input, usage.output) == (21 + 900 + 54450 + 2720, 283 + 40)
    assert (usage.cached_read, usage.cache_write, usage.cost_usd) == (54450, 2720, 0.0431)
    assert usage.model is None and result.model == "claude-sonnet-4-5-20250929"  # two models: none named
    assert "I'll look at the module first." in seen and any(isinstance(s, ToolCall) for s in seen)
    given = json.loads(record.read_text())
    assert given["prompt"] == "Add login." and Path(given["cwd"]) == tmp_path
    assert given["env"] == {"FLOWD_TEST_KEY": "k1"}
    await executor.close()


async def test_codex_stream_gives_the_last_message_commands_and_usage(tmp_path: Path) -> None:
    executor = CliExecutor(spec("codex_success.jsonl"))
    result = await executor.run_turn(turn(tmp_path))
    assert result.text == "Added `login()` in src/api/login.py; the tests pass."
    assert [c.tool for c in result.tool_calls] == ["command_execution", "file_change", "command_execution"]
    assert result.tool_calls[0].args == {"command": "bash -lc 'ls src/api'", "exitCode": 0}
    assert result.usage is not None
    assert (result.usage.input, result.usage.output, result.usage.cached_read) == (24763, 1122, 24448)
    assert result.usage.cost_usd is None and result.model == "m0"


@pytest.mark.parametrize(
    ("fixture", "code", "stderr", "kind"),
    [
        ("claude_usage_limit.jsonl", 1, "", "usage_limit"),
        ("claude_not_logged_in.jsonl", 1, "", "auth"),
        ("codex_rate_limit.jsonl", 1, "", "rate_limit"),
        ("codex_usage_limit.jsonl", 1, "", "usage_limit"),
        ("codex_success.jsonl", 1, "thread 'main' panicked at core/src/codex.rs:120", "crash"),
        ("codex_success.jsonl", 127, "codex: command not found", "unavailable"),
    ],
)
async def test_failures_are_classified_from_events_exit_code_and_stderr(
    tmp_path: Path, fixture: str, code: int, stderr: str, kind: str
) -> None:
    extra = ["--exit", str(code)] + (["--stderr", stderr] if stderr else [])
    with pytest.raises(AgentError) as caught:
        await CliExecutor(spec(fixture, *extra)).run_turn(turn(tmp_path))
    assert caught.value.kind == kind, caught.value.message


async def test_a_usage_limit_names_its_reset_time(tmp_path: Path) -> None:
    with pytest.raises(AgentError) as caught:
        await CliExecutor(spec("claude_usage_limit.jsonl", "--exit", "1")).run_turn(turn(tmp_path))
    assert caught.value.reset_at == datetime.fromtimestamp(1795964400, UTC)


async def test_a_missing_command_is_unavailable(tmp_path: Path) -> None:
    missing = ExecutorSpec(id="gone", kind="cli", command=[str(tmp_path / "no-such-agent")])
    with pytest.raises(AgentError) as caught:
        await CliExecutor(missing).run_turn(turn(tmp_path))
    assert caught.value.kind == "unavailable" and "cannot start" in caught.value.message


async def gone(pid: int) -> bool:
    """Whether `pid` ends: SIGKILL is sent when the turn fails, but on a loaded machine the kernel
    may take a moment to finish the process off (bounded, polled)."""
    for _ in range(200):
        if not pid_alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_silent_agent_is_killed_as_a_stall(tmp_path: Path) -> None:
    record = tmp_path / "seen.json"
    executor = CliExecutor(spec("codex_success.jsonl", "--hang-after", "2", "--record", str(record)))
    # Long enough for a loaded machine to start the agent and let it record its pid first.
    with pytest.raises(AgentError) as caught:
        await executor.run_turn(turn(tmp_path, stall=3.0))
    assert caught.value.kind == "stall"
    assert await gone(json.loads(record.read_text())["pid"])


async def test_a_cancelled_turn_kills_the_agent(tmp_path: Path) -> None:
    record = tmp_path / "seen.json"
    executor = CliExecutor(spec("claude_success.jsonl", "--hang-after", "2", "--record", str(record)))
    seen: asyncio.Queue[ToolCall | str] = asyncio.Queue()
    task = asyncio.create_task(executor.run_turn(turn(tmp_path), observe=seen.put_nowait))
    assert await asyncio.wait_for(seen.get(), timeout=30) == "I'll look at the module first."
    task.cancel()  # the agent has printed its second line and now hangs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(json.loads(record.read_text())["pid"])


def test_build_argv_adds_what_each_dialect_needs() -> None:
    assert build_argv(["claude"], model="claude-sonnet-4-5", resume="s1") == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--resume",
        "s1",
    ]
    assert build_argv(["claude", "-p", "--output-format", "stream-json", "--verbose"], model=None) == [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    assert build_argv(["codex"], model="gpt-5-codex") == [
        "codex", "exec", "--json", "--skip-git-repo-check", "--model", "gpt-5-codex",
    ]  # fmt: skip
    assert build_argv(["codex", "exec", "--json", "-m", "o3", "--skip-git-repo-check"], model="x") == [
        "codex", "exec", "--json", "-m", "o3", "--skip-git-repo-check",
    ]  # fmt: skip
    assert build_argv(["my-agent", "--flag"], model="x") == ["my-agent", "--flag"]


async def test_claude_sessions_are_resumed_for_the_same_task(tmp_path: Path) -> None:
    record = tmp_path / "seen.json"
    claude = tmp_path / "bin" / "claude"  # the dialect keys on the command's name
    claude.parent.mkdir()
    fixture = FIXTURES / "claude_success.jsonl"
    claude.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPLAY}" "{fixture}" --record "{record}" "$@"\n')
    claude.chmod(0o755)
    executor = CliExecutor(
        ExecutorSpec(id="claude", kind="cli", command=[str(claude)], model="claude-sonnet-4-5")
    )
    await executor.run_turn(turn(tmp_path))
    first = json.loads(record.read_text())["argv"]
    assert first == ["-p", "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5"]
    await executor.run_turn(turn(tmp_path, "That did not parse."))
    second = json.loads(record.read_text())["argv"]
    assert second[-2:] == ["--resume", "5b0c7e4e-1f5a-4d8e-9a43-6d3f1c2b7a10"]


def test_fold_ignores_banners_and_unknown_events() -> None:
    state = CliTurn()
    assert fold_line(state, b"Reading prompt from stdin...") == []
    assert fold_line(state, b'{"type": "future.event"}') == []
    assert fold_line(state, b"[1, 2]") == []
    assert state.text == "" and state.usage is None


def test_a_codex_warning_item_is_not_the_turns_failure() -> None:
    # codex 0.171 reports "Model metadata … not found" as an item of type error (docs/roster.md).
    turn = CliTurn()
    warning = "Model metadata for `gpt-5-codex` not found. Defaulting to fallback metadata"
    fold_line(
        turn,
        json.dumps({"type": "item.completed", "item": {"id": "i0", "type": "error", "message": warning}}),
    )
    fold_line(turn, json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "done"}}))
    assert turn.errors == [] and turn.warnings == [warning] and turn.text == "done"
    fold_line(turn, json.dumps({"type": "turn.failed", "error": {"message": "429 Too Many Requests"}}))
    assert turn.errors == ["429 Too Many Requests"]


async def test_a_claude_older_than_flowd_runs_fails_its_turn_in_one_sentence(tmp_path: Path) -> None:
    record = tmp_path / "seen.json"
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir()
    fixture = FIXTURES / "claude_success.jsonl"
    claude.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "1.0.3 (Claude Code)"; exit 0; fi\n'
        f'exec "{sys.executable}" "{REPLAY}" "{fixture}" --record "{record}" "$@"\n'
    )
    claude.chmod(0o755)
    executor = CliExecutor(ExecutorSpec(id="claude", kind="cli", command=[str(claude)]), clone=2)
    with pytest.raises(AgentError) as raised:
        await executor.run_turn(turn(tmp_path))
    assert raised.value.kind == "auth"  # out for the run, as a sign-in failure
    assert raised.value.message == (
        "claude#2: claude -p 1.0.3 is older than 2.1.332, the oldest flowd runs; install a newer one "
        "(npm install -g @anthropic-ai/claude-code@2.1.332 or later)"
    )
    assert not record.exists()  # no turn was started
