"""Pure parts of the ACP executor: the path policy, usage capture, the factory."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from acp.schema import PromptResponse, ToolCallLocation, ToolCallStart, ToolCallUpdate, Usage

from flowd.agents.acp_access import outside, tool_paths
from flowd.agents.acp_client import AcpExecutor
from flowd.agents.acp_process import base_environment
from flowd.agents.acp_turn import Turn, _is_notice, tool_args, tool_name
from flowd.agents.base import AgentError, FlowdMeta, ToolCall, TurnRequest, reaped
from flowd.agents.factory import make_executor
from flowd.agents.usage import capture_usage, model_usages
from flowd.base.errors import FlowdError
from flowd.store.config import ExecutorSpec


def test_outside_follows_dotdot_and_symlinks(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "link-out").symlink_to(tmp_path)
    assert not outside(cwd, str(cwd / "a/b.txt"))
    assert not outside(cwd, "relative/ok.txt")
    assert outside(cwd, str(cwd / ".." / "x.txt"))
    assert outside(cwd, "../x.txt")
    assert outside(cwd, str(cwd / "link-out" / "x.txt"))
    assert outside(cwd, "/etc/passwd")
    assert not outside(cwd, str(cwd))
    assert outside(tmp_path / "wor", str(cwd / "x"))  # a sibling sharing a prefix is outside


def test_tool_paths_reads_locations_and_raw_input() -> None:
    call = ToolCallUpdate(
        tool_call_id="1",
        locations=[ToolCallLocation(path="/a")],
        raw_input={"file_path": "/b", "content": "x", "path": 3},
    )
    assert tool_paths(call) == ["/a", "/b"]


def test_usage_reported_apart_is_added_up_and_included_usage_is_kept() -> None:
    claude = PromptResponse(
        stop_reason="end_turn",
        usage=Usage(
            input_tokens=100,
            output_tokens=50,
            cached_read_tokens=800,
            cached_write_tokens=10,
            total_tokens=960,
        ),
    )
    usage = capture_usage(claude)
    assert usage is not None
    assert (usage.input, usage.output, usage.cached_read, usage.cache_write) == (910, 50, 800, 10)
    included = PromptResponse(
        stop_reason="end_turn",
        usage=Usage(input_tokens=900, output_tokens=50, cached_read_tokens=800, total_tokens=950),
    )
    usage = capture_usage(included)
    assert usage is not None and usage.input == 900


def test_gemini_quota_meta_is_usage_with_its_model() -> None:
    gemini = PromptResponse(
        stop_reason="end_turn",
        field_meta={
            "quota": {
                "token_count": {"input_tokens": 321, "output_tokens": 12},
                "model_usage": [{"model": "gemini-2.5-pro", "token_count": {}}],
            }
        },
    )
    usage = capture_usage(gemini)
    assert usage is not None
    assert (usage.input, usage.output, usage.model) == (321, 12, "gemini-2.5-pro")
    assert capture_usage(PromptResponse(stop_reason="end_turn")) is None


def test_base_environment_carries_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    env = base_environment()
    assert "ANTHROPIC_API_KEY" not in env
    assert "PATH" in env


def test_factory_builds_acp_and_script_executors_and_names_missing_kinds(tmp_path: Path) -> None:
    acp_spec = ExecutorSpec(id="claude", kind="acp", command=["claude-agent-acp"], model="claude-sonnet-4-5")
    made = make_executor(acp_spec, clone=2)
    assert isinstance(made, AcpExecutor) and made.label == "claude#2"
    script_spec = ExecutorSpec(id="demo", kind="script", script="demo.script.json")
    with pytest.raises(FlowdError, match="needs `script`"):
        make_executor(script_spec, clone=1)
    script_spec._script_path = tmp_path / "demo.script.json"
    made = make_executor(script_spec, clone=1, log_dir=tmp_path)
    assert isinstance(made, AcpExecutor)
    assert made._command[:4] == [sys.executable, "-m", "flowd", "agent"]
    cli_spec = ExecutorSpec(id="aider", kind="cli", command=["aider"])
    from flowd.agents import factory

    if "cli" not in factory.CONSTRUCTORS:
        with pytest.raises(FlowdError, match="kind 'cli' is not available"):
            make_executor(cli_spec, clone=1)


def test_model_usage_counts_every_request_of_the_turn_per_model() -> None:
    # claude-agent-acp's shape (cache apart from input), with a side request on a second model.
    quota = {
        "token_count": {"totalTokens": 12108, "inputTokens": 3222, "cachedInputTokens": 7248,
                        "cachedWriteTokens": 1611, "outputTokens": 27},
        "model_usage": [
            {"model": "claude-haiku-4-5", "token_count": {"totalTokens": 1036, "inputTokens": 1016,
                                                          "outputTokens": 20}},
            {"model": "claude-sonnet-4-5", "token_count": {"totalTokens": 12108, "inputTokens": 3222,
             "cachedInputTokens": 7248, "cachedWriteTokens": 1611, "outputTokens": 27}},
        ],
    }  # fmt: skip
    found = model_usages({"quota": quota})
    assert [(u.model, u.input, u.output, u.cached_read, u.cache_write) for u in found] == [
        ("claude-sonnet-4-5", 12081, 27, 7248, 1611),
        ("claude-haiku-4-5", 1016, 20, None, None),
    ]
    # codex's shape: the cache apart too (total = input + cached + output).
    codex = {"model_usage": [{"model": "gpt-5-codex", "token_count": {
        "totalTokens": 11019, "inputTokens": 4400, "cachedInputTokens": 6599, "cacheWriteInputTokens": 0,
        "outputTokens": 20}}]}  # fmt: skip
    assert [(u.input, u.output, u.cached_read) for u in model_usages({"quota": codex})] == [(10999, 20, 6599)]
    # gemini's: input already holds the cache.
    gemini = {
        "model_usage": [
            {"model": "gemini-2.5-pro", "token_count": {"input_tokens": 11212, "output_tokens": 27}}
        ]
    }
    assert [(u.input, u.output) for u in model_usages({"quota": gemini})] == [(11212, 27)]
    assert model_usages({}) == [] and model_usages({"quota": {"model_usage": []}}) == []
    response = PromptResponse(stop_reason="end_turn", field_meta={"quota": quota})
    usage = capture_usage(response)
    assert usage is not None and (usage.model, usage.input) == ("claude-sonnet-4-5", 12081)


def test_the_answer_leaves_out_notices_and_unnumbered_warnings() -> None:
    turn = Turn(session_id="s", cwd=Path("/w"), observe=None)
    turn.chunks = [
        (None, "Warning: Model metadata for `gpt-5-codex` not found.\n\n"),
        ("m1", '{"tasks": []}'),
    ]
    assert turn.answer() == '{"tasks": []}' and turn.failure() is None
    plain = Turn(session_id="s", cwd=Path("/w"), observe=None)
    plain.chunks = [(None, "ready")]
    assert plain.answer() == "ready"  # an agent that numbers nothing (gemini): every chunk
    failed = Turn(session_id="s", cwd=Path("/w"), observe=None, failed=True)
    failed.chunks = [
        (None, "Warning: Model metadata not found.\n\n"),
        (None, "exceeded retry limit, last status: 429"),
    ]
    assert failed.failure() == "exceeded retry limit, last status: 429"
    assert _is_notice({"claudeCode": {"kind": "informational", "level": "warning"}})
    assert not _is_notice({"claudeCode": {"toolName": "Write"}}) and not _is_notice(None)


def test_a_tool_call_waits_for_its_input_before_it_is_told() -> None:
    told: list[object] = []
    turn = Turn(session_id="s", cwd=Path("/w"), observe=told.append)
    start = ToolCallStart(session_update="tool_call", tool_call_id="t1", title="Write", raw_input={},
                          field_meta={"claudeCode": {"toolName": "Write"}})  # fmt: skip
    turn.tool("t1", ToolCall(tool=tool_name(start), args=tool_args(start)), ready=False)
    assert told == []
    turn.pending["t1"].args = {"file_path": "/w/a.txt", "content": "x"}
    turn.tool("t1", turn.pending["t1"], ready=True)
    assert [(c.tool, c.args) for c in turn.tool_calls] == [
        ("Write", {"file_path": "/w/a.txt", "content": "x"})
    ]
    gemini = ToolCallStart(session_update="tool_call", tool_call_id="write_file__write_file_17_0",
                           title="Writing to a.txt", locations=[ToolCallLocation(path="/w/a.txt")])  # fmt: skip
    assert tool_name(gemini) == "write_file"
    assert tool_args(gemini) == {"title": "Writing to a.txt", "paths": ["/w/a.txt"]}


def test_missing_program_is_one_sentence_before_any_process(tmp_path: Path) -> None:
    with pytest.raises(AgentError) as caught:
        reaped(["no-such-agent-program", "--acp"], path=str(tmp_path))
    assert caught.value.kind == "unavailable"
    assert str(caught.value) == (
        "unavailable: cannot start no-such-agent-program: not found on PATH "
        "(install it, or give the roster entry's `command` its full path)"
    )
    assert reaped(["sh", "-c", "true"])[-3:] == [shutil.which("sh"), "-c", "true"]


async def test_an_acp_program_older_than_flowd_runs_is_refused_in_one_sentence(tmp_path: Path) -> None:
    fake = Path(__file__).resolve().parent.parent / "fixtures" / "agents" / "old_acp.py"
    command = [sys.executable, str(fake), "@agentclientprotocol/codex-acp", "2.5.9"]
    executor = AcpExecutor(label="codex#1", command=command, env={}, model=None)
    request = TurnRequest(
        role="reviewer", prompt="hi", cwd=tmp_path,
        meta=FlowdMeta(role="reviewer", run_id="r", epic_id="e"),
        turn_timeout_s=60, stall_timeout_s=60,
    )  # fmt: skip
    try:
        with pytest.raises(AgentError) as caught:
            await executor.run_turn(request)
    finally:
        await executor.close()
    assert caught.value.kind == "auth"
    assert caught.value.message == (
        "codex#1: codex-acp 2.5.9 is older than 2.6.0, the oldest flowd runs; install a newer one "
        "(npm install -g @agentclientprotocol/codex-acp@2.6.0 or later)"
    )
