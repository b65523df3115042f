"""flowd's own overhead per agent turn, against a bare ACP client round trip to the same agent.

Both sides drive the bundled scripted agent answering every prompt at once (one rule: a reply and
a usage report), each over its own agent process started before timing:

- bare: the `acp` SDK as a client: `initialize`, `session/new`, then one `session/prompt` per turn,
  the reply's message chunks collected;
- flowd: the engine's own path for a turn (`RunContext.ask`): a lease from a `RosterPool` holding
  one clone of the agent, the ACP round trip through `AcpExecutor` (session, stall watch, tool and
  message capture), the release, the trace events of the turn (`ExecutorLeased`, `AssistantMessage`,
  `TokensUsed`, `ExecutorReleased`) written by a `TraceWriter` to a real trace file, each folded
  into a `RunView` subscribed to the writer, as the runner wires them.

Turns alternate in blocks of 10 so both sides see the same machine load. Prints the median time
per turn (wall, and this process's CPU time: the agent's work is the same on both sides) and the
difference, flowd's own overhead per turn (target < 10 ms).

    .venv/bin/python bench/turn_overhead.py [--turns 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import acp  # noqa: E402

from flowd.agents.factory import script_command  # noqa: E402
from flowd.engine.context import RunContext  # noqa: E402
from flowd.engine.state import EpicPaths  # noqa: E402
from flowd.events.model import Event  # noqa: E402
from flowd.plan.model import StoryPlan  # noqa: E402
from flowd.roster.pool import RosterPool  # noqa: E402
from flowd.store.config import Settings, load_roster  # noqa: E402
from flowd.trace.log import TraceWriter  # noqa: E402
from flowd.trace.view import RunView  # noqa: E402
from flowd.vcs.gitops import Repo  # noqa: E402

BLOCK = 10
SCRIPT = {"model": "scripted", "rules": [{"reply": "done", "usage": {"input": 1200, "output": 80}}]}


class BareClient:
    """The least an ACP client must answer: message chunks collected, nothing else asked for."""

    def __init__(self) -> None:
        self.text: list[str] = []

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        content = getattr(update, "content", None)
        if content is not None and getattr(content, "text", None):
            self.text.append(content.text)

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise acp.RequestError.method_not_found("session/request_permission")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise acp.RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


async def bare_side(script: Path, cwd: Path) -> tuple[Any, Any, str, asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        *script_command(script),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=str(cwd),
        limit=16 * 1024 * 1024,
    )
    assert proc.stdin is not None and proc.stdout is not None
    client = BareClient()
    conn = acp.connect_to_agent(cast(acp.Client, client), proc.stdin, proc.stdout)
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    session = await conn.new_session(cwd=str(cwd), mcp_servers=[])
    return conn, client, str(session.session_id), proc


def flowd_side(repo: Path, script: Path) -> tuple[RunContext, TraceWriter, RosterPool]:
    (repo / ".flow").mkdir(parents=True, exist_ok=True)
    (repo / ".flow" / "roster.toml").write_text(
        f'[[executors]]\nid = "agent"\nkind = "script"\nscript = "{script}"\nroles = ["reviewer"]\nslots = 1\n'
    )
    roster = load_roster(repo, user_path=repo / "no-user-roster.toml")
    run_id = "bench-turns"
    view = RunView(run_id=run_id)
    writer = TraceWriter(repo / ".flow" / "runs" / run_id / "trace.jsonl", run_id)
    writer.fold_into(view)  # as the runner: folded under the lock, checkpointed every 4 MB

    def emit(event: Event) -> None:
        writer.emit(event)

    pool = RosterPool(roster, state_path=repo / ".flow" / "roster-state.json", emit=emit)
    plan = StoryPlan(epic_id="bench", stories=[])
    ctx = RunContext(
        repo=Repo(repo),
        plan=plan,
        plan_path=repo / "plan.json",
        settings=Settings(),
        run_id=run_id,
        epic_wt=repo,
        worktree_root=repo,
        paths=EpicPaths(repo, "bench"),
        pool=pool,
        emit=writer.emit,
        view=view,
    )
    return ctx, writer, pool


def timed(samples: list[tuple[float, float]], t0: tuple[float, float]) -> None:
    samples.append((time.perf_counter() - t0[0], time.process_time() - t0[1]))


async def measure(turns: int, tmp: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    script = tmp / "agent.script.json"
    script.write_text(json.dumps(SCRIPT))
    repo = tmp / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    os.environ["FLOWD_SCRIPT_STATE"] = str(tmp / "script-state")
    conn, client, session, proc = await bare_side(script, repo)
    ctx, writer, pool = flowd_side(repo, script)
    bare: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    try:
        await ctx.ask("reviewer", ctx.request("reviewer", "warm up", repo, "s1"), lane="s1")
        for block in range(0, turns, BLOCK):
            for _ in range(min(BLOCK, turns - block)):
                t0 = (time.perf_counter(), time.process_time())
                client.text.clear()
                reply = await conn.prompt(
                    session_id=session, prompt=[acp.text_block("do it")], flowd={"role": "reviewer"}
                )
                assert reply.stop_reason == "end_turn"
                timed(bare, t0)
            for _ in range(min(BLOCK, turns - block)):
                t0 = (time.perf_counter(), time.process_time())
                result = await ctx.ask("reviewer", ctx.request("reviewer", "do it", repo, "s1"), lane="s1")
                assert result.text == "done"
                timed(ours, t0)
    finally:
        await pool.aclose()
        writer.close()
        if proc.stdin is not None:
            proc.stdin.close()
        await proc.wait()
        await conn.close()
    return bare, ours


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bare, ours = asyncio.run(measure(args.turns, Path(tmp)))
    load = os.getloadavg()[0]
    bw, bc = (statistics.median(x[i] for x in bare) * 1000 for i in (0, 1))
    fw, fc = (statistics.median(x[i] for x in ours) * 1000 for i in (0, 1))
    print(f"{args.turns} instant turns each side (load average {load:.1f} on {os.cpu_count()} cores)")
    print(f"bare ACP client round trip: median {bw:.2f} ms wall, {bc:.2f} ms CPU")
    print(
        f"flowd turn (lease, ACP, 4 trace events written and folded): median {fw:.2f} ms wall, {fc:.2f} ms CPU"
    )
    verdict = "met" if fw - bw < 10 else "NOT met"
    print(
        f"flowd's own overhead per turn: {fw - bw:.2f} ms wall, {fc - bc:.2f} ms CPU (target < 10 ms): {verdict}"
    )


if __name__ == "__main__":
    main()
