"""The ACP executor driving the bundled scripted agent: real processes, a real git worktree."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from flowd.agents.acp_client import AcpExecutor
from flowd.agents.base import ToolCall

from .conftest import request


async def test_turn_writes_files_and_returns_reply_usage_and_tool_calls(
    worktree: Path, write_script: Callable[..., Path], executors: Callable[..., AcpExecutor]
) -> None:
    script = write_script(
        [
            {
                "when": {"role": "coder", "story": "api", "task": "login"},
                "writes": {"src/api/login.py": "def login(): ...\n"},
                "deletes": ["README.md"],
                "run": ["echo ran > ran.txt"],
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
    assert tools == ["Write src/api/login.py", "Delete README.md", "Run echo ran > ran.txt"]
    assert [call.tool for call in result.tool_calls] == tools
    assert "".join(item for item in seen if isinstance(item, str)) == result.text
    assert result.refusals == []
    pid = executor.pid
    assert pid is not None
    await executor.close()
    assert executor.pid is None
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
