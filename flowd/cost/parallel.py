"""`flowd cost` over big histories on several cores (docs/performance.md: cost).

The report is a fold of independent traces, so the trace files are split into contiguous groups of
about equal size, the first group is folded in this process and each other one in a forked worker
(`flowd.cost.aggregate` either way), and the folds and scan statistics are merged in file order:
the same tables, the same skipped files and problems in the same order. Small histories (under `BYTES_PER_WORKER` per extra worker)
and single files are read in this process: starting a worker costs more than it saves there.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from datetime import tzinfo
from pathlib import Path

from flowd.cost.aggregate import Aggregator
from flowd.cost.fold import UsageFold
from flowd.cost.prices import Prices
from flowd.cost.samples import ScanStats
from flowd.store.config import Settings

BYTES_PER_WORKER = 64 << 20

Files = list[tuple[str, Path]]


def workers_for(files: Files) -> int:
    """How many processes to fold `files` with: one per `BYTES_PER_WORKER`, at most the cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    total = 0
    for _, path in files:
        try:
            total += path.stat().st_size
        except OSError:
            continue  # the scan reports it
    return max(1, min(cores, len(files), total // BYTES_PER_WORKER))


def split(files: Files, parts: int) -> list[Files]:
    """Contiguous groups of about equal bytes (file order kept within and across groups)."""
    sizes = []
    for _, path in files:
        try:
            sizes.append(path.stat().st_size)
        except OSError:
            sizes.append(0)
    target = sum(sizes) / parts
    groups: list[Files] = [[]]
    filled = 0.0
    for entry, size in zip(files, sizes, strict=True):
        if groups[-1] and filled >= target * len(groups) and len(groups) < parts:
            groups.append([])
        groups[-1].append(entry)
        filled += size
    return groups


def _fold_group(
    files: Files,
    settings: Settings,
    zone: tzinfo,
    since: str | None,
    until: str | None,
    run_id: str | None,
) -> tuple[UsageFold, ScanStats]:
    stats = ScanStats()
    aggregator = Aggregator(Prices.from_settings(settings), zone, since, until, run_id)
    aggregator.read(files, stats)
    return aggregator.fold(), stats


def fold_files(
    files: Files,
    stats: ScanStats,
    *,
    settings: Settings,
    zone: tzinfo,
    since: str | None,
    until: str | None,
    run_id: str | None,
    workers: int,
) -> UsageFold:
    """The fold of every sample of `files` (filtered by `run_id`, `since`, `until`); `stats` gets
    the merged scan statistics. `workers` 1 reads in this process (the language server's way)."""
    if workers <= 1 or len(files) <= 1:
        folded, own = _fold_group(files, settings, zone, since, until, run_id)
        _add_stats(stats, own)
        return folded
    groups = split(files, workers)
    # fork: the workers inherit the imported modules and price data instead of importing them again.
    # This process folds the first group itself while the workers fold the others.
    with ProcessPoolExecutor(len(groups) - 1, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(_fold_group, g, settings, zone, since, until, run_id) for g in groups[1:]]
        results = [_fold_group(groups[0], settings, zone, since, until, run_id)]
        results += [f.result() for f in futures]
    total = UsageFold()
    for folded, own in results:
        total.merge(folded)
        _add_stats(stats, own)
    return total


def _add_stats(stats: ScanStats, other: ScanStats) -> None:
    stats.files += other.files
    stats.skipped_files += other.skipped_files
    stats.skipped_lines += other.skipped_lines
    stats.problems.extend(other.problems)
    stats.budgets.update(other.budgets)
    stats.epics.update(other.epics)
