"""The repository's daemon against one in-process server, in one run (docs/editors.md).

Builds `bench/reattach.py`'s live run (1 M events by default, its runner a `sleep`, the runner's
last checkpoint a full 4 MB before the end) and measures, each against its baseline in the same run:

1. An editor reload re-attaching: a fresh `flowd serve --no-daemon` (today's re-attach: it folds
   the checkpoint and the tail) against `flowd serve` joining the running daemon, which has the
   run folded already; seconds from spawn to the run's full snapshot (its `flow/cost`, the
   snapshot's last note), medians of 5. Goal: <= 0.1 s through the daemon.
2. 10 editor sessions and 5 pages on the run: the daemon's RSS against one in-process server's
   (goal <= 1.3x), and the `flow/lane` latency from an appended `TaskStarted` line to every
   client, p95 over 20 lines (goal <= 50 ms).
3. `flowd status --json` through the daemon against without one (medians of 5).

    .venv/bin/python bench/daemon.py [--events 1000000]

The daemon runs in a temporary `XDG_RUNTIME_DIR` and is stopped at the end, with every client.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from reattach import RUN_ID, build_repo, write_checkpoint  # noqa: E402

from flowd.base import jsonl  # noqa: E402
from tests.daemon.pipe_client import PipeClient  # noqa: E402
from tests.daemon.ws_client import WebSocket  # noqa: E402


def snapshot_seen(client: PipeClient) -> None:
    client.wait_for(lambda m: m.get("method") == "flow/cost" and m["params"].get("runId") == RUN_ID, 300)


def reload_seconds(repo: Path, *args: str) -> tuple[float, PipeClient]:
    seconds, _answered, client = reload_timed(repo, *args)
    return seconds, client


def reload_timed(repo: Path, *args: str) -> tuple[float, float, PipeClient]:
    """Seconds from spawn to the full snapshot, and from spawn to `initialize`'s answer."""
    t0 = time.perf_counter()
    client = PipeClient(repo, args=args)
    client.send(
        {
            "id": 1,
            "method": "initialize",
            "params": {"processId": os.getpid(), "rootUri": repo.as_uri(), "capabilities": {}},
        }
    )
    client.wait_for(lambda m: m.get("id") == 1, 300)
    answered = time.perf_counter() - t0
    client.send({"method": "initialized", "params": {}})
    snapshot_seen(client)
    return time.perf_counter() - t0, answered, client


def median_s(step: Any, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        t0 = time.perf_counter()
        step()
        spent.append(time.perf_counter() - t0)
    return statistics.median(spent)


def reload_parts(repo: Path) -> dict[str, float]:
    """What a reload through the daemon is made of, each part alone (medians of 5): the
    interpreter's start, the forwarder's imports (`flowd serve`'s path: flowd.cli, the serve
    command and flowd/daemon/forward.py), finding the main checkout (`git rev-parse`), connecting
    to the daemon with its hello (a `status` hello, answered at once)."""
    from flowd.daemon import client
    from flowd.daemon.forward import main_checkout

    def spawn(code: str) -> None:
        subprocess.run([sys.executable, "-c", code], check=True)

    python = median_s(lambda: spawn("pass"))
    imports = median_s(lambda: spawn("import flowd.cli, flowd.server.main, flowd.daemon.forward"))

    def hello() -> None:
        conn = client.hello(repo, "status")
        assert conn is not None
        conn.close()

    return {
        "python": python,
        "imports": imports - python,
        "checkout": median_s(lambda: main_checkout(repo)),
        "hello": median_s(hello),
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def daemon_info(repo: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "flowd", "daemon", "status", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(done.stdout))


class Page:
    """A page's WebSocket session, recording when each `flow/lane` arrives."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.port is not None
        token = parse_qs(parts.query)["token"][0]
        self.ws = WebSocket(parts.port, f"/rpc?token={token}", {"Host": f"127.0.0.1:{parts.port}"})
        self.ws.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        self.ws.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        self.lanes: list[tuple[float, dict[str, Any]]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while (message := self.ws.receive()) is not None:
            if message.get("method") == "flow/lane":
                self.lanes.append((time.perf_counter(), message["params"]))


def stamp(client: PipeClient) -> None:
    """Record arrival times: wrap the client's reader list so each message gets `_at`."""
    original = client.messages

    class Stamped(list[dict[str, Any]]):
        def append(self, item: dict[str, Any]) -> None:
            item["_at"] = time.perf_counter()
            super().append(item)

    stamped = Stamped(original)
    client.messages = stamped


def append_task(trace: Path, n: int) -> tuple[str, float]:
    title = f"bench task {n}"
    line = {
        "v": 1, "seq": 10**8 + n, "at": "2026-11-30T23:00:00.000Z", "runId": RUN_ID,
        "event": {"type": "TaskStarted", "lane": "story-19", "index": 10 + n, "count": 1000, "title": title},
    }  # fmt: skip
    t0 = time.perf_counter()
    with trace.open("ab") as handle:
        handle.write(jsonl.dumps(line) + b"\n")
    return title, t0


def status_seconds(repo: Path, env: dict[str, str]) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "flowd", "status", "--json"],
            cwd=repo,
            env=env,
            capture_output=True,
            check=True,
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def lane_latencies(
    trace: Path, clients: list[PipeClient], pages: list[Page], first: int, count: int
) -> list[float]:
    """Seconds from each appended `TaskStarted` line to its `flow/lane` at every client. Arrival
    times are stamped by each client's reader thread; this loop only looks at new messages, and
    rarely, so the measuring itself does not starve those threads."""
    latencies: list[float] = []
    seen: dict[int, int] = {}
    for n in range(first, first + count):
        title, t0 = append_task(trace, n)
        deadline = time.monotonic() + 10
        pending: list[PipeClient | Page] = [*clients, *pages]
        while pending and time.monotonic() < deadline:
            time.sleep(0.02)
            still: list[PipeClient | Page] = []
            for who in pending:
                got = arrival(who, title, seen)
                if got is None:
                    still.append(who)
                else:
                    latencies.append(got - t0)
            pending = still
        if pending:
            print(f"   line {n}: {len(pending)} client(s) did not hear it in 10 s")
        time.sleep(0.15)  # past the ~10/s pacing of a lane's notes
    return latencies


def arrival(who: PipeClient | Page, title: str, seen: dict[int, int]) -> float | None:
    """When `who` got the `flow/lane` of the task `title` (None: not yet), looking only at the
    messages it got since the last look."""
    if isinstance(who, Page):
        messages = who.lanes
        start = seen.get(id(who), 0)
        fresh = messages[start:]
        seen[id(who)] = start + len(fresh)
        found = [at for at, params in fresh if (params.get("task") or {}).get("title") == title]
    else:
        everything = who.messages
        start = seen.get(id(who), 0)
        fresh = everything[start:]
        seen[id(who)] = start + len(fresh)
        found = [
            m["_at"] for m in fresh
            if m.get("method") == "flow/lane" and (m["params"].get("task") or {}).get("title") == title
        ]  # fmt: skip
    return found[0] if found else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="flowd-bench-daemon-"))
    runtime = scratch / "runtime"
    runtime.mkdir()
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    runner = subprocess.Popen(["sleep", "3600"])
    clients: list[PipeClient] = []
    pages: list[Page] = []
    repo = scratch
    try:
        repo, count, size = build_repo(scratch, args.events, runner.pid)
        trace = repo / ".flow" / "runs" / RUN_ID / "trace.jsonl"
        write_checkpoint(trace)
        print(f"trace: {count} events, {size / 1e6:.0f} MB, checkpoint 4 MB before the end")

        alone, rss_alone = [], 0.0
        for _ in range(5):
            seconds, client = reload_seconds(repo, "--no-daemon")
            alone.append(seconds)
            rss_alone = max(rss_alone, rss_mb(client.process.pid))
            client.close()
        _seconds, base = reload_seconds(repo, "--no-daemon")
        stamp(base)
        base_lat = sorted(lane_latencies(trace, [base], [], 100, 10))
        base.close()
        first, client = reload_seconds(repo)  # starts the daemon, which folds the run
        clients.append(client)
        joined, answers = [], []
        for _ in range(5):
            seconds, answered, extra = reload_timed(repo)
            joined.append(seconds)
            answers.append(answered)
            extra.close()
        a, d = statistics.median(alone), statistics.median(joined)
        print(f"1. reload to the full snapshot: in-process {a:.3f} s · through the daemon {d:.3f} s "
              f"({d / a:.2f}x; goal <= 0.1 s) · the daemon's own start {first:.3f} s")  # fmt: skip
        parts, answer = reload_parts(repo), statistics.median(answers)
        rest = answer - sum(parts.values())
        print(f"   its parts: python {1000 * parts['python']:.0f} ms · the forwarder's imports "
              f"{1000 * parts['imports']:.0f} ms · git rev-parse {1000 * parts['checkout']:.0f} ms · "
              f"connect + hello {1000 * parts['hello']:.0f} ms · initialize answered at "
              f"{1000 * answer:.0f} ms (the rest {1000 * rest:.0f} ms) · initialized → the snapshot's "
              f"last note {1000 * (d - answer):.0f} ms")  # fmt: skip

        for _ in range(9):
            clients.append(reload_seconds(repo)[1])
        for c in clients:
            stamp(c)
        url = subprocess.run(
            [sys.executable, "-m", "flowd", "web", "--no-open"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()[-1]
        pages = [Page(url) for _ in range(5)]
        time.sleep(1.0)
        info = daemon_info(repo)
        rss_daemon = rss_mb(int(info["pid"]))
        print(f"2. {info['sessions']} sessions ({len(clients)} editors, {len(pages)} pages): daemon RSS {rss_daemon:.0f} MB "
              f"· one in-process server {rss_alone:.0f} MB ({rss_daemon / rss_alone:.2f}x; goal <= 1.3x)")  # fmt: skip
        latencies = lane_latencies(trace, clients, pages, 200, 20)
        latencies.sort()
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        print(f"   flow/lane from an appended line to every client: p50 {1000 * statistics.median(latencies):.0f} ms, "
              f"p95 {1000 * p95:.0f} ms over {len(latencies)} deliveries (goal p95 <= 50 ms); one in-process "
              f"server to its one editor: p50 {1000 * statistics.median(base_lat):.0f} ms, "
              f"p95 {1000 * base_lat[int(0.95 * (len(base_lat) - 1))]:.0f} ms")  # fmt: skip

        with_daemon = status_seconds(repo, dict(os.environ))
        empty = scratch / "no-daemon"
        empty.mkdir()
        without = status_seconds(repo, {**os.environ, "XDG_RUNTIME_DIR": str(empty)})
        print(f"3. flowd status --json: through the daemon {with_daemon:.3f} s · without {without:.3f} s "
              f"({with_daemon / without:.2f}x)")  # fmt: skip
    finally:
        for page in pages:
            page.ws.close()
        for c in clients:
            c.close()
        subprocess.run([sys.executable, "-m", "flowd", "daemon", "stop"], cwd=repo, capture_output=True)
        runner.kill()
        runner.wait()
        subprocess.run(["rm", "-rf", str(scratch)], check=False)


if __name__ == "__main__":
    main()
