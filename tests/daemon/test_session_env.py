"""A run launched from a daemon's session starts with that session's environment (its forwarder's
PATH and keys), not with the environment of whoever started the daemon (docs/editors.md)."""

from __future__ import annotations

import time
from pathlib import Path

from flowd.trace.log import load_run_record, pid_alive
from tests.daemon.pipe_client import PipeClient
from tests.server.demo_repo import hold, sample


def test_a_run_gets_the_launching_sessions_environment(tmp_path: Path) -> None:
    release = tmp_path / "release"
    repo, _plan = sample(tmp_path / "demo", lambda rules: hold(rules, "coder", "core", release))
    repo = repo.resolve()
    first = PipeClient(repo, env={"FLOWD_TEST_MARK": "daemon-starter"})
    second = PipeClient(repo, env={"FLOWD_TEST_MARK": "launcher", "FLOWD_TEST_ONLY_LAUNCHER": "1"})
    run_id = None
    try:
        first.initialize()
        second.initialize()
        started = second.request(
            "workspace/executeCommand",
            {"command": "flow.launchEpic", "arguments": [{"plan": "calc.epic.json"}]},
            60,
        )
        run_id = started["result"]["runId"]
        record = load_run_record(repo, run_id)
        assert record is not None
        environ = dict(
            entry.split("=", 1)
            for entry in Path(f"/proc/{record.pid}/environ").read_bytes().decode().split("\0")
            if "=" in entry
        )
        assert environ["FLOWD_TEST_MARK"] == "launcher" and environ["FLOWD_TEST_ONLY_LAUNCHER"] == "1"
        # The first editor hears the run the second one launched: one daemon, one fold.
        first.wait_for(lambda m: m.get("method") == "flow/run" and m["params"]["runId"] == run_id, 60)
    finally:
        release.touch()
        if run_id is not None:
            second.request(
                "workspace/executeCommand",
                {"command": "flow.cancelEpic", "arguments": [{"runId": run_id}]},
                60,
            )
            record = load_run_record(repo, run_id)
            deadline = time.monotonic() + 30
            while record is not None and pid_alive(record.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        first.close()
        second.close()
