"""Protocol fuzzing, fast: a seeded stream of malformed and hostile JSON-RPC against a real
`flowd serve` over stdio (`bench/fuzz_lsp.py` runs the long campaign and prints the figures)."""

from __future__ import annotations

from pathlib import Path

from bench.fuzz_lsp import fuzz


def test_hostile_json_rpc_is_answered_or_ignored_and_the_server_keeps_serving(tmp_path: Path) -> None:
    report = fuzz(tmp_path, batches=8, per_batch=15, seed=5)
    assert report.messages == 120 and len(report.by_kind) == 8
    assert report.alive
    assert report.status_answered == report.status_checks == 8
    assert report.wrong_answers == []
    assert report.requests_answered == report.requests_expected > 0
    # Nothing hostile launched a run or wrote outside the workspace; exit after shutdown is clean.
    assert report.runs_launched == 0 and report.escaped_files == []
    assert report.exit_code == 0
