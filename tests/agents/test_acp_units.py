"""Pure parts of the ACP executor: the path policy, usage capture, the factory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from acp.schema import PromptResponse, ToolCallLocation, ToolCallUpdate, Usage

from flowd.agents.acp_client import AcpExecutor, base_environment, outside, tool_paths
from flowd.agents.factory import make_executor
from flowd.agents.usage import capture_usage
from flowd.config import ExecutorSpec
from flowd.errors import FlowdError


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
