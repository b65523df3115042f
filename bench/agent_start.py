"""Start-up of the bundled scripted agent: process spawn to `initialize` answered.

Three programs, started in turn (rounds interleave them, so all see the same machine load), each
answering one ACP `initialize` on stdio:

- floor: this Python answering with a fixed line: the interpreter's own start-up, the anchor;
- SDK agent: the least agent written with the `acp` SDK (`acp.run_agent`), the way the scripted
  agent was written before it spoke the wire itself (docs/scripted-agent.md "Wire");
- scripted agent: `flowd agent script` as flowd starts it (`script_command`).

Prints the median wall time and the process's own CPU time (user + system, from `wait4`) of
each, and each against the floor. `--real` also starts the real ACP agent programs `make
test-agents` installs (claude-agent-acp, codex-acp, gemini; from its cache, with a throwaway
home each time, unconfined), which shows what a story's first turn waits for when its agent is
not started ahead (docs/performance.md "A dependent's lane made ahead").

    .venv/bin/python bench/agent_start.py [--rounds 15] [--real]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.agents.factory import script_command  # noqa: E402

FLOOR = (
    "import sys; sys.stdin.readline(); "
    'sys.stdout.write(\'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\\n\'); sys.stdout.flush(); '
    "sys.stdin.read()"
)
SDK_AGENT = """
import asyncio, acp
class Agent:
    async def initialize(self, protocol_version, **_):
        return acp.InitializeResponse(protocol_version=protocol_version)
asyncio.run(acp.run_agent(Agent()))
"""
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


def start_once(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds from spawn to the `initialize` answer, the process's CPU seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    answer = json.loads(proc.stdout.readline())
    wall = time.perf_counter() - t0
    if answer.get("result", {}).get("protocolVersion") != 1:
        raise SystemExit(f"{command[:3]}: unexpected answer {answer}")
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    return wall, usage.ru_utime + usage.ru_stime


AGENT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flowd-test" / "agents"
REAL = {  # the programs' ACP commands, as tests/agents_real starts them
    "claude-agent-acp": ("@agentclientprotocol+claude-agent-acp@0.101.0", ["claude-agent-acp"]),
    "codex-acp": ("@agentclientprotocol+codex-acp@2.6.0", ["codex-acp"]),
    "gemini --experimental-acp": ("@google+gemini-cli@0.61.0", ["gemini", "--experimental-acp"]),
}


def real_once(command: list[str]) -> tuple[float, float]:
    """A real agent's (seconds from spawn to its `initialize` answer, CPU seconds until then)."""
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "HOME": home,
            "ANTHROPIC_API_KEY": "x",
            "OPENAI_API_KEY": "x",
            "GEMINI_API_KEY": "x",
        }
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=home,
            start_new_session=True,  # its helpers too are ended below
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        while line := proc.stdout.readline():
            if json.loads(line).get("id") == 0:
                break
        wall = time.perf_counter() - t0
        if not line:
            raise SystemExit(f"{command[0]}: ended without answering `initialize`")
        with contextlib.suppress(ProcessLookupError):  # ended already
            os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdin.close()
        proc.stdout.close()
    return wall, usage.ru_utime + usage.ru_stime


def real_agents(rounds: int) -> None:
    found = {
        name: [str(AGENT_CACHE / folder / "node_modules" / ".bin" / argv[0]), *argv[1:]]
        for name, (folder, argv) in REAL.items()
        if (AGENT_CACHE / folder / "node_modules" / ".bin" / argv[0]).exists()
    }
    if not found:
        print(f"no real agent program in {AGENT_CACHE}: `make test-agents` installs them")
        return
    for name, command in found.items():
        runs = [real_once(command) for _ in range(rounds)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(
            f"{name:28} spawn → initialize answered: median {wall * 1000:7.1f} ms wall, {cpu * 1000:7.1f} ms CPU"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--real", action="store_true", help="also the real ACP agents `make test-agents` installs"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "agent.script.json"
        script.write_text(json.dumps({"rules": [{"reply": "done"}]}))
        env = {**os.environ, "FLOWD_SCRIPT_STATE": str(Path(tmp) / "state")}
        programs = {
            "floor (bare interpreter)": [sys.executable, "-c", FLOOR],
            "SDK agent (acp.run_agent)": [sys.executable, "-c", SDK_AGENT],
            "scripted agent": script_command(script),
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in programs}
        for _ in range(args.rounds):
            for name, command in programs.items():
                samples[name].append(start_once(command, env))
    load = os.getloadavg()[0]
    print(f"{args.rounds} starts each (load average {load:.1f} on {os.cpu_count()} cores)")
    medians = {
        name: (statistics.median(s[0] for s in runs), statistics.median(s[1] for s in runs))
        for name, runs in samples.items()
    }
    floor_wall, floor_cpu = medians["floor (bare interpreter)"]
    for name, (wall, cpu) in medians.items():
        print(
            f"{name:28} spawn → initialize answered: median {wall * 1000:7.1f} ms wall "
            f"({wall / floor_wall:4.1f}× floor), {cpu * 1000:7.1f} ms CPU ({cpu / floor_cpu:4.1f}× floor)"
        )
    sdk_wall, sdk_cpu = medians["SDK agent (acp.run_agent)"]
    ours_wall, ours_cpu = medians["scripted agent"]
    print(
        f"scripted agent vs the SDK agent: {ours_wall / sdk_wall:.2f}× wall, {ours_cpu / sdk_cpu:.2f}× CPU "
        f"({(sdk_cpu - ours_cpu) * 1000:.0f} ms of CPU saved per clone)"
    )
    if args.real:
        real_agents(min(args.rounds, 5))


if __name__ == "__main__":
    main()
