"""The language server following 8 live lanes of a 25,000-file monorepo, against baselines in the same run.

One held epic of 8 stories (the scripted coder sleeps in every story, so all 8 lanes stay `active`
with their worktrees checked out) on the monorepo of bench/monorepo.py, and the same on a small
repository. Then, one after the other while the lanes stay live, measured for `--idle` seconds
after the watches have settled:

- `flowd serve` on the monorepo: its 8 worktrees watched live (inotify);
- `flowd serve` on the monorepo with `FLOWD_INOTIFY_WATCHES=1`: every worktree polled instead
  (the fallback past the watch limit, docs/performance.md);
- a bare `watchfiles.awatch` process of the same 8 worktrees, with the server's debounce and step;
- `flowd serve` on the small repository's 8 lanes.

For each: the server's RSS, its CPU while idle (share of one core, from /proc, so a busy machine
does not inflate it) and the inotify watches it holds (`inotify wd:` lines of its fdinfo). Prints
figures and ratios; nothing is asserted.

    .venv/bin/python bench/server_watch.py [--files 25000] [--idle 20]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lsprotocol import types as lsp  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from bench.monorepo import ENV, generate, one_line_epic  # noqa: E402
from flowd.server.inotify import directories, watches_of  # noqa: E402

LANES = 8
HOLD_MS = 1_800_000  # the coders' sleep: far longer than the bench
BARE = """\
import asyncio, sys
from watchfiles import DefaultFilter, awatch

async def follow(path):
    watch_filter = DefaultFilter(ignore_dirs=(*DefaultFilter.ignore_dirs, ".flow"))
    async for _ in awatch(path, debounce=60, step=10, watch_filter=watch_filter):
        pass

async def main():
    await asyncio.gather(*(follow(p) for p in sys.argv[1:]))

asyncio.run(main())
"""


def held_epic(repo: Path) -> Path:
    """An epic of LANES one-line stories whose coders all sleep HOLD_MS (gates `true`)."""
    rules: list[dict[str, object]] = [{"when": {"role": "coder"}, "delayMs": HOLD_MS, "reply": "done"}]
    config = f'gates = ["true"]\njudgeRounds = 0\nconcurrency = {LANES}\nstallTimeoutS = 7200\n'
    return one_line_epic(repo, "held", LANES, rules, config)


def launch_held(repo: Path) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """Start the held epic detached; return once its 8 story worktrees exist."""
    plan = held_epic(repo)
    run = subprocess.Popen(
        [sys.executable, "-m", "flowd", "run", str(plan), "--run-id", "held-bench"],
        cwd=repo,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    worktrees = [repo.parent / f"{repo.name}.flowd" / "held" / f"s{n}" for n in range(LANES)]
    deadline = time.monotonic() + 900
    while not all((w / ".git").exists() for w in worktrees):
        if run.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the held epic on {repo} did not check out its {LANES} worktrees")
        time.sleep(0.5)
    return run, worktrees


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def settle(pid: int, wanted: int, timeout: float = 120) -> None:
    """Until the process holds `wanted` watches or more, and then 2 s without change."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = watches_of(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif now >= wanted and time.monotonic() - since >= 3:
            return  # (a polled worktree takes no watch: the 3 s also let its first poll pass)
        time.sleep(0.2)


def measure(pid: int, idle: float) -> dict[str, float]:
    before = cpu_seconds(pid)
    time.sleep(idle)
    cpu = (cpu_seconds(pid) - before) / idle
    return {"rss": rss_mb(pid), "cpu": cpu * 100, "watches": watches_of(pid)}


async def server_figures(repo: Path, wanted: int, idle: float, env: dict[str, str]) -> dict[str, float]:
    client = LanguageClient("bench", "1")
    await client.start_io(sys.executable, "-m", "flowd", "serve", cwd=str(repo), env=env)
    await client.initialize_async(
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            root_uri=repo.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=repo.as_uri(), name=repo.name)],
        )
    )
    client.initialized(lsp.InitializedParams())
    assert client._server is not None
    pid = client._server.pid
    await asyncio.to_thread(settle, pid, wanted)
    figures = await asyncio.to_thread(measure, pid, idle)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()  # type: ignore[no-untyped-call]
    return figures


def bare_figures(worktrees: list[Path], wanted: int, idle: float) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(BARE)
    proc = subprocess.Popen([sys.executable, script.name, *map(str, worktrees)])
    try:
        settle(proc.pid, wanted)
        return measure(proc.pid, idle)
    finally:
        proc.terminate()
        proc.wait()
        os.unlink(script.name)


def line(name: str, f: dict[str, float], base: dict[str, float] | None = None) -> str:
    text = f"  {name:<34} RSS {f['rss']:6.1f} MB, idle CPU {f['cpu']:5.2f}% of a core, {f['watches']:5.0f} watches"
    if base is not None:
        ratios = (f[k] / base[k] if base[k] else float("nan") for k in ("rss", "cpu", "watches"))
        text += "  ({:.2f}x, {:.2f}x, {:.2f}x)".format(*ratios)
    return text


def stop(run: subprocess.Popen[bytes]) -> None:
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=25_000)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measured")
    args = parser.parse_args()
    logging.getLogger("pygls").setLevel(logging.ERROR)  # the flow/* notifications we do not read
    tmp = Path(tempfile.mkdtemp(prefix="flowd-server-watch-"))
    runs: list[subprocess.Popen[bytes]] = []
    try:
        mono, small = tmp / "mono", tmp / "small"
        generate(mono, args.files, 1)
        generate(small, 100, 1)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        started = time.perf_counter()
        run, mono_wts = launch_held(mono)
        runs.append(run)
        print(
            f"{LANES} lanes live on {args.files} files ({time.perf_counter() - started:.0f} s to check out)"
        )
        run, small_wts = launch_held(small)
        runs.append(run)
        per = directories(mono_wts[0])
        print(f"each monorepo worktree: {per} directories; {LANES} lanes: {LANES * per} watches at least")
        env = {**ENV, "FLOWD_LOG": "WARNING"}
        live = asyncio.run(server_figures(mono, LANES * per, args.idle, env))
        polled_env = {**env, "FLOWD_INOTIFY_WATCHES": "1"}
        polled = asyncio.run(server_figures(mono, 1, args.idle, polled_env))
        bare = bare_figures(mono_wts, LANES * per, args.idle)
        small_per = directories(small_wts[0])
        base = asyncio.run(server_figures(small, LANES * small_per, args.idle, env))
        print(f"idle over {args.idle:g} s (RSS, CPU, watches; ratios against the line named):")
        print(line("flowd serve, small repo (baseline)", base))
        print(line("bare awatch of the 8 worktrees", bare))
        print(line("flowd serve, monorepo, live", live, base) + " vs small")
        print(line("  the same", live, bare) + " vs bare awatch")
        print(line("flowd serve, monorepo, polled", polled, live) + " vs live")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        for run in runs:
            stop(run)
        for repo in (tmp / "mono", tmp / "small"):
            if repo.is_dir():
                subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
