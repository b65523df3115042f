"""What the reaper costs a gate (docs/sandbox.md "Processes"): `run_command("true")` in a lane
worktree, as flowd runs every gate and setup command, under the native reaper (what flowd runs on
x86-64, flowd/agents/reaper_native.py), under reaper.py (a Python start, what it ran before) and
with no reaper at all, unconfined and confined (Landlock), in one run: rounds interleave the
variants, so all see the same machine load. Prints medians, each variant's cost over no reaper
and the ratios.

    .venv/bin/python bench/reaper.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flowd.agents.base import reaped  # noqa: E402
from flowd.agents.reaper_native import native_reaper  # noqa: E402
from flowd.engine import gates  # noqa: E402
from flowd.sandbox import landlock  # noqa: E402
from flowd.sandbox.confine import Confinement, active  # noqa: E402

# How the gate's command is wrapped: the call site's `reaped`, swapped per variant.
VARIANTS = {
    "none": lambda command: list(command),
    "python": functools.partial(reaped, native=False),
    "native": functools.partial(reaped, native=True),
}


def lane(root: Path) -> tuple[Path, Path]:
    repo = root / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo, check=True)
    wt = root / "repo.flowd" / "ep" / "s1"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/s1", str(wt)], cwd=repo, check=True)
    return repo, wt


async def gate_ms(wt: Path) -> float:
    started = time.perf_counter()
    result = await gates.run_command("true", wt, log=None, timeout_s=30)
    assert result.ok, result.describe()
    return (time.perf_counter() - started) * 1000


async def main(rounds: int) -> None:
    if native_reaper() is None:
        raise SystemExit("bench/reaper.py: no native reaper on this machine (x86-64 only)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo, wt = lane(root)
        confinement = Confinement(
            "enforce", checkout=repo, common_dir=repo / ".git", lanes_root=root / "repo.flowd", epic="ep"
        )
        places = {"unconfined": None, "confined": confinement if landlock.abi() >= 2 else None}
        figures: dict[str, list[float]] = {}
        for _ in range(rounds):
            for place, where in places.items():
                for name, wrap in VARIANTS.items():
                    gates.reaped = wrap  # type: ignore[assignment]
                    with active(where):
                        figures.setdefault(f"{place} {name}", []).append(await gate_ms(wt))
        gates.reaped = reaped
    med = {name: statistics.median(values) for name, values in figures.items()}
    print(f'{rounds} rounds, per gate (`run_command("true")`), medians:')
    for place, where in places.items():
        if place == "confined" and where is None:
            print("  confined: no Landlock here")
            continue
        base = med[f"{place} none"]
        line = f"  {place:<10} no reaper {base:6.2f} ms"
        for name in ("python", "native"):
            cost = med[f"{place} {name}"]
            line += f" | {name} {cost:6.2f} ms ({cost - base:+6.2f} ms, {cost / base:.2f}x)"
        print(line)
        python, native = med[f"{place} python"] - base, med[f"{place} native"] - base
        print(
            f"  {'':<10} the reaper's own cost: native {native:+.2f} ms against reaper.py's {python:+.2f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    asyncio.run(main(parser.parse_args().rounds))
