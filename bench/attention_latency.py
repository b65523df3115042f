"""Attention latency of `flowd serve`: a `StoryPaused` / `StoryAnswered` line written to a run's
trace → `flow/attention` (reason, then `cleared`) at a real client; target within 1 s.

A writer thread appends, for each lane and round, a lane transition (`StoryStatusChanged`, whose
`flow/lane` is the baseline measured in the same run), a pause and its answer, as `flowd run`
would; a pygls client connected to `flowd serve` over stdio records when each notification
arrives. Prints p50/p95 of both and their ratio.

    .venv/bin/python bench/attention_latency.py [--lanes 10] [--rounds 5] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.notify_latency import RUN_ID, _repo  # noqa: E402
from flowd.events.model import RunEnded, RunStarted, StoryAnswered, StoryPaused, StoryStatusChanged  # noqa: E402
from flowd.trace.log import TraceWriter, trace_path  # noqa: E402

Key = tuple[str, int, str]


def _write(repo: Path, lanes: int, rounds: int, gap: float, written: dict[Key, float]) -> None:
    writer = TraceWriter(trace_path(repo, RUN_ID), RUN_ID)
    names = [f"lane-{n:02d}" for n in range(1, lanes + 1)]
    writer.emit(
        RunStarted(
            epic_id="bench",
            epic_branch="epic/bench",
            plan="bench.epic.json",
            stories=names,
            concurrency=lanes,
        )
    )
    for round_ in range(1, rounds + 1):
        for name in names:
            steps: list[tuple[str, Any]] = [
                ("lane", StoryStatusChanged(story=name, status="active", reason=f"round {round_}")),
                (
                    "blocked",
                    StoryPaused(
                        lane=name, reason="blocked", question=f"{name} round {round_}?", options=["stop"]
                    ),
                ),
                ("cleared", StoryAnswered(lane=name, answer=f"round {round_}", by="cli")),
            ]
            for kind, event in steps:
                written[(name, round_, kind)] = time.monotonic()
                writer.emit(event)
                time.sleep(gap)  # the pace of the scripted events, not a wait for the server
    writer.emit(RunEnded(outcome="done", done=lanes, failed=0, skipped=0))
    writer.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q) - 1)]


async def main(lanes: int, rounds: int, gap_ms: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = _repo(Path(tmp))
        client = LanguageClient("bench", "1")
        received: dict[Key, float] = {}
        expected = lanes * rounds * 3
        done = asyncio.Event()

        def got(key: Key) -> None:
            received.setdefault(key, time.monotonic())
            if len(received) >= expected:
                done.set()

        @client.feature("flow/attention")  # type: ignore[untyped-decorator]
        def on_attention(params: Any) -> None:
            text = params.message if params.reason != "cleared" else params.message.rsplit(": ", 1)[-1] + "?"
            round_ = int(text.split("round ")[-1].rstrip("?"))
            got((params.lane, round_, params.reason))

        @client.feature("flow/lane")  # type: ignore[untyped-decorator]
        def on_lane(params: Any) -> None:
            reason = getattr(params, "reason", None) or ""
            if params.status == "active" and reason.startswith("round "):
                got((params.lane, int(reason.split()[-1]), "lane"))

        for method in ("flow/run", "flow/task", "flow/clone", "flow/cost"):
            client.feature(method)(lambda params: None)
        await client.start_io(sys.executable, "-m", "flowd", "serve", cwd=str(repo))
        await client.initialize_async(
            lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=repo.as_uri())
        )
        client.initialized(lsp.InitializedParams())
        await client.protocol.send_request_async("flow/status", {})  # attached and idle

        written: dict[Key, float] = {}
        thread = threading.Thread(target=_write, args=(repo, lanes, rounds, gap_ms / 1000, written))
        thread.start()
        try:
            await asyncio.wait_for(done.wait(), 60 + expected * gap_ms / 1000 * 2)
        finally:
            await asyncio.to_thread(thread.join)
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()  # type: ignore[no-untyped-call]

    def ms(kinds: tuple[str, ...]) -> list[float]:
        return [(received[k] - written[k]) * 1000 for k in written if k in received and k[2] in kinds]

    attention, lane = ms(("blocked", "cleared")), ms(("lane",))
    print(f"lanes={lanes} rounds={rounds} notifications={len(received)}/{expected}")
    print(
        f"flow/attention: p50={statistics.median(attention):.1f} ms p95={_pct(attention, 0.95):.1f} ms "
        f"max={max(attention):.1f} ms (target: every one within 1000 ms)"
    )
    print(f"flow/lane (baseline): p50={statistics.median(lane):.1f} ms p95={_pct(lane, 0.95):.1f} ms")
    print(f"ratio attention/lane p95: {_pct(attention, 0.95) / max(_pct(lane, 0.95), 0.001):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    a = parser.parse_args()
    asyncio.run(main(a.lanes, a.rounds, a.gap_ms))
