"""Benchmark: the cost report over a 1,000,000-line trace set.

Writes a realistic repository of traces in a temp dir (most lines are not usage; ~30% are
`TokensUsed` over several models, executors, clones, stories, days and hours), then times:

- the baseline: a bare `json.loads` over every line (no aggregation at all);
- the full report: `flowd.cost.cli.cost_report` (scan + price + aggregate), as `flowd cost` runs it;

and prints records/s for both, their ratio (target >= 1.0x: the report must beat the bare loop),
and the peak memory (the process's max RSS, which bounds the report's; target < 200 MB). The temp dir is
removed at the end. Run: `.venv/bin/python bench/cost_report.py [LINES]`.
"""

from __future__ import annotations

import gc
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from flowd.cost.cli import cost_report

RUNS = 20
MODELS = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro", "claude-opus-4-1", "scripted", "my-local"]
EXECUTORS = [("claude", 3), ("codex", 12), ("gemini", 2)]
STORIES = [f"story-{n}" for n in range(12)]
AGENTS = ["coder", "coder", "coder", "reviewer", "judge", "planner"]


_TOOL = (
    '{{"v":1,"seq":{seq},"at":"{at}","runId":"{run}","event":{{"type":"ToolUse","lane":"{lane}",'
    '"executor":"codex","tool":"edit","args":{{"path":"src/{lane}/mod{mod}.py","old":"{old}","new":"{new}"}}}}}}'
)
_SAY = (
    '{{"v":1,"seq":{seq},"at":"{at}","runId":"{run}","event":{{"type":"AssistantMessage","lane":"{lane}",'
    '"agent":"coder","text":"{text}"}}}}'
)
_TASK = (
    '{{"v":1,"seq":{seq},"at":"{at}","runId":"{run}","event":{{"type":"TaskStarted","lane":"{lane}",'
    '"index":{index},"count":6,"title":"Add the API"}}}}'
)
_USED = (
    '{{"v":1,"seq":{seq},"at":"{at}","runId":"{run}","event":{{"type":"TokensUsed","lane":"{lane}",'
    '"executor":"{executor}",{clone}"agent":"{agent}","model":"{model}","usage":{{"input":{input},'
    '"output":{output},"total":{total},"cachedRead":{cached},"cacheWrite":{written}{cost}}},'
    '"estimated":{estimated}}}}}'
)


def _other_line(rng: random.Random, seq: int, at: str, run: str) -> str:
    lane = rng.choice(STORIES)
    kind = rng.random()
    if kind < 0.5:
        return _TOOL.format(seq=seq, at=at, run=run, lane=lane, mod=seq % 50, old="x" * 40, new="y" * 60)
    if kind < 0.8:
        return _SAY.format(seq=seq, at=at, run=run, lane=lane, text="Working on it. " * 8)
    return _TASK.format(seq=seq, at=at, run=run, lane=lane, index=1 + seq % 6)


def _usage_line(rng: random.Random, seq: int, at: str, run: str) -> str:
    executor, slots = rng.choice(EXECUTORS)
    agent = rng.choice(AGENTS)
    model = rng.choice(MODELS)
    input_ = rng.randrange(500, 260_000)
    output = rng.randrange(50, 8000)
    return _USED.format(
        seq=seq,
        at=at,
        run=run,
        lane=rng.choice(STORIES),
        executor=executor,
        clone=f'"clone":{rng.randrange(1, slots + 1)},' if agent == "coder" else "",
        agent=agent,
        model=model,
        input=input_,
        output=output,
        total=input_ + output,
        cached=input_ // 2,
        written=input_ // 10,
        cost=f',"costUsd":{rng.random() / 10:.6f}' if rng.random() < 0.2 else "",
        estimated="true" if model == "scripted" else "false",
    )


def generate(repo: Path, lines: int) -> list[Path]:
    rng = random.Random(7)
    start = datetime(2026, 10, 20, 6, tzinfo=UTC)
    step = timedelta(days=8) / lines  # a week and a day: a DST change (Europe) falls inside
    per_run = lines // RUNS
    paths: list[Path] = []
    written = 0
    for r in range(RUNS):
        run = f"run-{r:02d}"
        path = repo / ".flow" / "runs" / run / "trace.jsonl"
        path.parent.mkdir(parents=True)
        count = per_run if r < RUNS - 1 else lines - written
        with path.open("w") as handle:
            chunk: list[str] = []
            for seq in range(1, count + 1):
                moment = start + step * (written + seq)
                at = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
                if rng.random() < 0.3:
                    chunk.append(_usage_line(rng, seq, at, run))
                else:
                    chunk.append(_other_line(rng, seq, at, run))
                if len(chunk) >= 10_000:
                    handle.write("\n".join(chunk) + "\n")
                    chunk = []
            if chunk:
                handle.write("\n".join(chunk) + "\n")
        written += count
        paths.append(path)
    (repo / ".flow" / "config.toml").write_text('[prices."my-local"]\ninput = 0.5\noutput = 1.5\n')
    return paths


def baseline(paths: list[Path]) -> tuple[float, int]:
    count = 0
    began = time.perf_counter()
    for path in paths:
        with path.open("rb") as handle:
            for line in handle:
                json.loads(line)
                count += 1
    return time.perf_counter() - began, count


def main() -> int:
    lines = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    base = Path(tempfile.mkdtemp(prefix="flowd-cost-bench-"))
    try:
        began = time.perf_counter()
        paths = generate(base, lines)
        size = sum(p.stat().st_size for p in paths)
        print(
            f"generated {lines:,} lines in {len(paths)} traces ({size / 1e6:.0f} MB) in {time.perf_counter() - began:.1f}s"
        )

        gc.collect()
        base_s, count = baseline(paths)
        gc.collect()
        began = time.perf_counter()
        report = cost_report(base, time_zone="Europe/Rome", runs_per_day=5)
        report_s = time.perf_counter() - began

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

        base_rate, report_rate = count / base_s, count / report_s
        print(f"json.loads baseline: {base_s:.2f}s, {base_rate:,.0f} records/s")
        print(f"cost report:         {report_s:.2f}s, {report_rate:,.0f} records/s")
        print(f"ratio (report / baseline): {report_rate / base_rate:.2f}x (target >= 1.0x)")
        print(f"peak memory (max RSS of the whole process): {peak / 1e6:.1f} MB (target < 200 MB)")
        print(
            f"report: {report.runs} runs, {report.requests:,} requests, {report.tokens:,} tokens, "
            f"cost ${report.cost_usd or 0:,.2f}, unpriced {report.unpriced.requests:,} requests, "
            f"{len(report.by_hour)} hour buckets, skipped lines {report.skipped.lines}"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
