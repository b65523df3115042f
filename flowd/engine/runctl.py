"""Run control shared by the CLI and the language server: run ids, detached launch, cancel.

A run launched from the editor is a detached `flowd run` process (its own session, so an editor
reload does not kill it); it writes its own `run.json` and trace. Cancelling sends SIGTERM, which
the runner turns into a graceful stop with outcome `cancelled`.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flowd.base.errors import InputError
from flowd.base.timeutil import now
from flowd.trace.log import RunRecord, is_active, load_run_record, pid_alive, run_dir


def new_run_id(epic_id: str) -> str:
    return f"{epic_id}-{now().strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class LaunchOptions:
    concurrency: int | None = None
    fail_fast: bool | None = None
    budget_usd: float | None = None
    pause_on: list[str] | None = None  # None: the run's own (a resume), else exactly these
    env: dict[str, str] | None = None  # the launching session's environment (None: this process's)


def launch_detached(repo: Path, plan: Path, run_id: str, options: LaunchOptions) -> subprocess.Popen[bytes]:
    """Start `flowd run` detached; its stderr goes to `.flow/runs/<runId>/runner.log`."""
    log_dir = run_dir(repo, run_id)
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "flowd", "run", str(plan), "--run-id", run_id, "--json"]
    if options.concurrency is not None:
        command += ["--concurrency", str(options.concurrency)]
    if options.fail_fast:
        command.append("--fail-fast")
    if options.budget_usd is not None:
        command += ["--budget-usd", str(options.budget_usd)]
    if options.pause_on is not None:
        command += ["--pause-on", ",".join(options.pause_on)]
    with (log_dir / "runner.log").open("ab") as log:
        return subprocess.Popen(
            command,
            cwd=repo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env=options.env,
        )


def wait_for_record(
    repo: Path, run_id: str, process: subprocess.Popen[bytes], timeout_s: float = 20.0
) -> RunRecord:
    """Wait until the launched runner has written run.json (or died, with its log's last line)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = load_run_record(repo, run_id)
        if record is not None:
            return record
        if process.poll() is not None:
            log = run_dir(repo, run_id) / "runner.log"
            lines = [
                ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()
            ]
            raise InputError(lines[-1] if lines else f"flowd run exited with code {process.returncode}")
        time.sleep(0.05)
    raise InputError(
        f"run {run_id} did not start within {timeout_s:.0f}s (see {run_dir(repo, run_id)}/runner.log)"
    )


def cancel_run(repo: Path, run_id: str, *, wait_s: float = 30.0) -> str:
    """Stop a run gracefully; returns its outcome (`cancelled`, or how it had already ended)."""
    record = load_run_record(repo, run_id)
    if record is None:
        raise InputError(f"unknown run {run_id!r} (see `flowd status` for the runs of this repository)")
    if not is_active(record):
        return record.outcome or "interrupted"
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return "interrupted"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        current = load_run_record(repo, run_id)
        if current is not None and current.ended_at is not None:
            return current.outcome or "cancelled"
        if not pid_alive(record.pid):
            current = load_run_record(repo, run_id)
            return (current.outcome if current else None) or "cancelled"
        time.sleep(0.05)
    return "cancelling"
