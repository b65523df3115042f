"""What lane confinement costs (docs/sandbox.md "Cost"): per gate and per agent start, confined
with Landlock against the same unconfined, in one run (rounds interleave the variants, so all
see the same machine load). Bubblewrap, when installed, is measured beside it on the same gate.

- gate: `run_command("true")` in a lane worktree, as flowd runs every gate and setup command;
- agent start: the scripted agent started as flowd starts every ACP agent (under the reaper),
  from spawn to its `initialize` answer;
- ruleset: building the lane's Landlock ruleset alone (flowd's side of the cost);
- namespace: the same confined gate and agent start without the binder's mount namespace (the
  user's socket files not hidden), and the look for sockets to hide alone (flowd's side);
- bubblewrap: `bwrap --ro-bind / / --bind <lane> <lane> --dev /dev --proc /proc true` vs `true`.

Goal: confined minus unconfined at most 5 ms each.

    .venv/bin/python bench/sandbox.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.agents.base import reaped  # noqa: E402
from flowd.agents.factory import script_command  # noqa: E402
from flowd.engine.gates import run_command  # noqa: E402
from flowd.sandbox import confine, landlock, sockets  # noqa: E402
from flowd.sandbox.confine import Confinement, active, spawning  # noqa: E402

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}


def lane(root: Path) -> tuple[Path, Path]:
    repo = root / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo, check=True)
    wt = root / "repo.flowd" / "ep" / "s1"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/s1", str(wt)], cwd=repo, check=True)
    script = root / "script.json"
    script.write_text(json.dumps({"rules": [{"reply": "ok"}]}), encoding="utf-8")
    return repo, wt


async def gate(wt: Path) -> None:
    result = await run_command("true", wt, log=None, timeout_s=30)
    assert result.ok, result.describe()


async def agent_start(wt: Path, script: Path) -> None:
    command = script_command(script)
    with spawning(wt, "flowd agent script") as confined:
        proc = await asyncio.create_subprocess_exec(
            *confined.argv(reaped(command)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=wt,
            env={**confined.env, "PATH": "/usr/bin:/bin"},
            start_new_session=True,
            preexec_fn=confined.preexec_fn,
            pass_fds=confined.pass_fds,
        )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    await proc.stdin.drain()
    answer = json.loads(await proc.stdout.readline())
    assert answer.get("result", {}).get("protocolVersion") == 1, answer
    proc.stdin.close()
    await proc.wait()


async def timed(make: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await make()
    return (time.perf_counter() - started) * 1000


def spawn_ms(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True)
    return (time.perf_counter() - started) * 1000


async def main(rounds: int) -> None:
    version = landlock.abi()
    if version == 0:
        raise SystemExit("bench/sandbox.py: this kernel offers no Landlock; nothing to measure")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo, wt = lane(root)
        script = root / "script.json"
        confinement = Confinement(
            "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=root / "repo.flowd", epic="ep"
        )
        figures: dict[str, list[float]] = {}
        bwrap = shutil.which("bwrap")
        hiding = sockets.available()
        for _ in range(rounds):
            for name, where in (("unconfined", None), ("landlock", confinement), ("no-ns", confinement)):
                confine.sockets.available = (lambda: False) if name == "no-ns" else (lambda: hiding)  # type: ignore[method-assign]
                with active(where):
                    figures.setdefault(f"gate {name}", []).append(await timed(lambda: gate(wt)))
                    figures.setdefault(f"agent {name}", []).append(
                        await timed(lambda: agent_start(wt, script))
                    )
            started = time.perf_counter()
            found = sockets.masks(Path.home(), [wt, repo])
            figures.setdefault("masks", []).append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            rules = confinement.rules(confinement.lane(wt))
            landlock.build(rules, version).close()
            figures.setdefault("ruleset", []).append((time.perf_counter() - started) * 1000)
            if bwrap is not None:
                figures.setdefault("true unconfined", []).append(spawn_ms(["true"]))
                box = [
                    bwrap,
                    "--ro-bind",
                    "/",
                    "/",
                    "--bind",
                    str(wt),
                    str(wt),
                    "--dev",
                    "/dev",
                    "--proc",
                    "/proc",
                ]
                figures.setdefault("true bubblewrap", []).append(spawn_ms([*box, "true"]))
    med = {name: statistics.median(values) for name, values in figures.items()}
    print(f"landlock ABI {version}, {rounds} rounds, {len(rules)} rules per lane process; medians:")
    for what in ("gate", "agent"):
        base, cost = med[f"{what} unconfined"], med[f"{what} landlock"]
        label = "per gate" if what == "gate" else "per agent start"
        print(
            f"  {label:<16} unconfined {base:7.2f} ms  confined {cost:7.2f} ms  "
            f"cost {cost - base:+6.2f} ms ({cost / base:.2f}x)  goal <= 5 ms"
        )
    print(f"  ruleset build    {med['ruleset']:7.2f} ms (in flowd, per lane process)")
    print(f"  namespace        {'on' if hiding else 'not available here'}; {len(found)} places hidden")
    for what in ("gate", "agent"):
        base, cost = med[f"{what} no-ns"], med[f"{what} landlock"]
        print(
            f"  {what + ' no ns':<16} confined without {base:7.2f} ms  with {cost:7.2f} ms  cost {cost - base:+6.2f} ms"
        )
    print(f"  socket look      {med['masks']:7.2f} ms (in flowd, per lane process)")
    if "true bubblewrap" in med:
        base, cost = med["true unconfined"], med["true bubblewrap"]
        print(
            f"  bubblewrap       unconfined {base:7.2f} ms  bwrap {cost:7.2f} ms  cost {cost - base:+6.2f} ms"
        )
    else:
        print("  bubblewrap       not installed (apt-get install bubblewrap to compare)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args().rounds))
