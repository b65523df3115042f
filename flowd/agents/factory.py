"""`make_executor`: the roster entry → a live `Executor`, by kind.

Each kind's constructor lives in its own module; this table only names them, so adding a kind
is one entry here.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from flowd.agents import acp_import
from flowd.agents.base import Executor
from flowd.agents.cli_kind import CliExecutor
from flowd.agents.openai_kind import OpenAIExecutor
from flowd.base.errors import FlowdError
from flowd.store.config import ExecutorSpec

Constructor = Callable[[ExecutorSpec, int, Path | None], Executor]


def _log_path(spec: ExecutorSpec, clone: int, log_dir: Path | None) -> Path | None:
    return log_dir / f"{spec.id}-{clone}.stderr.log" if log_dir is not None else None


def _acp_executor(spec: ExecutorSpec, clone: int, log_dir: Path | None, command: list[str]) -> Executor:
    """An ACP agent started by `command`: the `acp` kind's own program or the scripted agent."""
    acp_import.sdk()  # first: the SDK the quick way (flowd/agents/acp_import.py)
    from flowd.agents.acp_client import AcpExecutor

    return AcpExecutor(
        label=f"{spec.id}#{clone}",
        command=command,
        env=spec.resolved_env,
        model=spec.model,
        log_path=_log_path(spec, clone, log_dir),
    )


def _acp(spec: ExecutorSpec, clone: int, log_dir: Path | None) -> Executor:
    if not spec.command:
        raise FlowdError(f"executor {spec.id!r}: kind 'acp' needs `command` (the agent to start)")
    return _acp_executor(spec, clone, log_dir, list(spec.command))


ACP_KINDS = frozenset({"acp", "script"})


def preload(specs: Iterable[ExecutorSpec]) -> None:
    """Import the ACP client in a background thread when the roster has ACP executors.

    The import (mostly the `acp` SDK's schema models) takes about a quarter of a second of CPU
    (flowd/agents/acp_import.py), kept out of the commands that never start an agent. A run
    needs it for its first lane's first executor; made there, it held the event loop, and every
    lane's git work with it, while the first story waited (docs/performance.md, "Throughput"). Begun as the run gets ready, it
    overlaps the epic branch and the first worktrees; an executor made before it ends waits for
    the rest of it only (Python's import lock)."""
    if any(spec.kind in ACP_KINDS for spec in specs) and "flowd.agents.acp_client" not in sys.modules:
        threading.Thread(target=_import_quietly, name="flowd-preload", daemon=True).start()


def _import_quietly() -> None:
    # A failed import here would print a thread's traceback; the first executor made imports it
    # again and reports the failure as one sentence, as without the preload.
    with contextlib.suppress(Exception):
        acp_import.sdk()
        importlib.import_module("flowd.agents.acp_client")


def script_command(script: Path) -> list[str]:
    """How flowd starts its bundled scripted agent: this interpreter, this flowd."""
    return [sys.executable, "-m", "flowd", "agent", "script", "--script", str(script)]


def _script(spec: ExecutorSpec, clone: int, log_dir: Path | None) -> Executor:
    if spec.script_path is None:
        raise FlowdError(f"executor {spec.id!r}: kind 'script' needs `script` (the script file)")
    return _acp_executor(spec, clone, log_dir, script_command(spec.script_path))


CONSTRUCTORS: dict[str, Constructor] = {
    "acp": _acp,
    "script": _script,
    "cli": lambda spec, clone, log_dir: CliExecutor(spec, clone=clone, log_dir=log_dir),
    "openai": lambda spec, clone, log_dir: OpenAIExecutor(spec, clone=clone, log_dir=log_dir),
}

# Kinds served by modules outside this package's ACP support, for the error message.
_PROVIDED_BY = {
    "cli": "flowd.agents.cli_kind",
    "openai": "flowd.agents.openai_kind",
}


def make_executor(spec: ExecutorSpec, *, clone: int, log_dir: Path | None = None) -> Executor:
    """A fresh executor for clone `clone` of `spec`; the caller owns it and must `close()` it."""
    constructor = CONSTRUCTORS.get(spec.kind)
    if constructor is None:
        where = _PROVIDED_BY.get(spec.kind)
        provider = f" (provided by {where}, which is not installed in this build)" if where else ""
        raise FlowdError(f"executor {spec.id!r}: kind {spec.kind!r} is not available{provider}")
    return constructor(spec, clone, log_dir)
