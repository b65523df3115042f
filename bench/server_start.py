"""Start-up of `flowd serve` against a bare pygls server, measured side by side in the same run.

The bare server is three lines of pygls written to a temp file (a `LanguageServer` and
`start_io()`): what any pygls server pays for Python, pygls and lsprotocol. Each round starts both
over stdio with a pygls client (alternating which goes first, so both see the same machine load)
and times `initialize`: from spawning the process to the answer, in wall time and in the server
process's CPU time (which a busy machine does not inflate). Prints the medians, the ratios
(target <= 1.5x) and the modules `flowd serve` had imported when it answered, and then once the run
manager had started (heavy modules load on first need, docs/performance.md).

    .venv/bin/python bench/server_start.py [--rounds 7]
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

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

BARE = """\
from pygls.lsp.server import LanguageServer

LanguageServer("bare", "1").start_io()
"""

HEAVY = ("pydantic", "git", "flowd.events.model", "flowd.engine", "flowd.cost", "watchfiles", "rich")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (from /proc: immune to waiting for a busy machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def initialize(argv: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds from spawn to the answer, the server's CPU seconds by then)."""
    client = LanguageClient("bench", "1")
    t0 = time.perf_counter()
    await client.start_io(*argv, cwd=str(cwd))
    await client.initialize_async(
        lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=cwd.as_uri())
    )
    elapsed = time.perf_counter() - t0
    assert client._server is not None
    cpu = cpu_seconds(client._server.pid)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()  # type: ignore[no-untyped-call]
    return elapsed, cpu


def loaded_at_initialize(cwd: Path) -> list[str]:
    """The heavy modules imported once the server and its handlers are built (before initialize)."""
    probe = "import json, sys\nfrom flowd.server import setup\nsetup.build_server()\nprint(json.dumps(list(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True, check=True)
    names = json.loads(out.stdout)
    return [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bare_server.py").write_text(BARE)
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        bare_argv = [sys.executable, str(root / "bare_server.py")]
        flowd_argv = [sys.executable, "-m", "flowd", "serve"]
        bare: list[tuple[float, float]] = []
        flowd: list[tuple[float, float]] = []
        await initialize(bare_argv, root)  # warm the page cache for both
        await initialize(flowd_argv, root)
        for n in range(rounds):
            pair = [(bare_argv, bare), (flowd_argv, flowd)]
            for argv, times in pair if n % 2 == 0 else reversed(pair):
                times.append(await initialize(argv, root))
        heavy = loaded_at_initialize(root)
    for i, what in ((0, "wall"), (1, "CPU")):
        b = statistics.median(x[i] for x in bare)
        f = statistics.median(x[i] for x in flowd)
        print(
            f"initialize, {what}: bare pygls {b * 1000:.0f} ms, flowd serve {f * 1000:.0f} ms "
            f"(medians of {rounds}); ratio {f / b:.2f}x (target <= 1.5x): {'met' if f / b <= 1.5 else 'NOT met'}"
        )
    print(f"heavy modules loaded by the server's handlers module: {', '.join(heavy) or 'none'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    asyncio.run(main(parser.parse_args().rounds))
