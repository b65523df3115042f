"""Folding traces in worker processes gives the report a single process gives: same tables, same
skipped files and problems in the same order, same budgets (docs/performance.md: cost)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flowd.cost import parallel
from flowd.cost.cli import cost_report
from flowd.trace.log import trace_path

from .traces import started, used, write_trace

AT = "2026-10-25T01:30:00.000Z"
EVENTS = [
    (AT, used(input=10, output=3, cached_read=4, cache_write=2, cost=0.0125, lane="", executor="x", clone=0)),
    ("2026-10-25T01:31:59.999Z", used("reviewer", model=None, input=5, output=0, estimated=True)),
]
ODD = (
    b'{"v": 1, "event": {"type": "TokensUsed", "agent": "c", "usage": {"input": 4}}, "at": "2026-10-25T02:00:00.000Z"}',
    b'{"v":1,"seq":93,"at":"2026-10-25T01:30:00.000Z","runId":"r","event":{"type":"TokensUsed"',  # torn
)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for n in range(7):
        hour = f"2026-10-{20 + n}T{n:02d}:15:00.000Z"
        events = [(hour, started(budget=1.0 + n, epic=f"e{n}"))] + [
            (hour, used(input=100 * n + i, output=i, model="claude-sonnet-4-5", lane=f"s{i}"))
            for i in range(20)
        ]
        write_trace(repo, f"run-{n}", events + EVENTS, extra=ODD if n % 2 else ())
    broken = trace_path(repo, "run-3b")
    broken.mkdir(parents=True)  # a directory where a trace belongs: a skipped file, reported
    return repo


@pytest.mark.parametrize("workers", [2, 3, 7])
def test_parallel_fold_gives_the_single_process_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    repo = _repo(tmp_path)
    expected = cost_report(repo, time_zone="Europe/Rome").wire()
    monkeypatch.setattr(parallel, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(parallel, "workers_for", lambda files: workers)
    got = cost_report(repo, time_zone="Europe/Rome", parallel=True).wire()
    assert got == expected
    assert expected["skipped"]["files"] == 1 and expected["budgets"]


def test_split_keeps_file_order_and_every_file(tmp_path: Path) -> None:
    files = []
    for n, size in enumerate([5, 1, 1, 9, 2, 2, 30, 1]):
        path = tmp_path / f"{n}.jsonl"
        path.write_bytes(b"x" * size)
        files.append((str(n), path))
    for parts in (1, 2, 3, 8):
        groups = parallel.split(files, parts)
        assert [entry for group in groups for entry in group] == files
        assert 1 <= len(groups) <= parts and all(groups)
