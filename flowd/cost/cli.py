"""`flowd cost` (docs/cost.md) and `cost_report_for`, the same report for the language server.

Reads every trace under `<repo>/.flow/runs/`; a repository without runs gets an empty report.
`--since`/`--until` take ISO dates or times: a time without an offset, and a bare date, are read
in the report's zone; `--since DAY` starts at that day's midnight and `--until DAY` includes the
whole day (it ends at the next midnight); a time given to `--until` is exclusive.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flowd.base.errors import EXIT_OK, InputError
from flowd.base.timeutil import iso
from flowd.cost.hidden import hidden_requests
from flowd.cost.model import CostReport
from flowd.cost.render import render
from flowd.cost.report import report_from_fold
from flowd.cost.samples import ScanStats, runs_dir, trace_files
from flowd.store.config import Settings, load_settings
from flowd.vcs.gitcli import toplevel

FORMATS = {"json": "json", "text": "text", "markdown": "md", "md": "md"}


def repo_root(cwd: Path | None = None, *, strict: bool = False) -> Path:
    """The git toplevel holding `cwd`; outside any repository, `cwd` itself (its report is empty),
    or with `strict` an InputError (exit 2, as every other command outside a repository)."""
    where = cwd or Path.cwd()
    top = toplevel(where)
    if top is not None:
        return top
    if strict:
        raise InputError(f"{where.resolve()} is not a git repository; run flowd inside a git checkout")
    return where


def resolve_zone(name: str | None, default: str | None = None) -> tzinfo:
    """`--tz`, else the config's `timeZone`, else the machine's zone, else UTC."""
    if name is not None:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise InputError(
                f"--tz {name!r} is not a known time zone; use an IANA name like 'Europe/Rome' or 'UTC'"
            )
    if default is not None:
        try:
            return ZoneInfo(default)
        except (ZoneInfoNotFoundError, ValueError):
            pass  # the config loader already refuses unknown zones; be safe anyway
    return local_zone()


def local_zone() -> tzinfo:
    candidates = [os.environ.get("TZ", "").removeprefix(":")]
    try:
        link = os.readlink("/etc/localtime")
        candidates.append(link.split("zoneinfo/", 1)[1] if "zoneinfo/" in link else "")
    except OSError:
        pass
    for name in candidates:
        if name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    offset = datetime.now().astimezone().tzinfo
    return offset if offset is not None else UTC


def parse_bound(text: str, zone: tzinfo, *, option: str, end: bool = False) -> str:
    """A `--since`/`--until` value as the trace's UTC ISO form (see the module doc for the rules)."""
    value = text.strip()
    try:
        if len(value) == 10:  # a bare date, YYYY-MM-DD
            day = datetime.fromisoformat(value).date()
            if end:
                day += timedelta(days=1)
            moment = datetime.combine(day, time(0), tzinfo=zone)
        else:
            moment = datetime.fromisoformat(value.replace(" ", "T", 1))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=zone)
    except ValueError:
        raise InputError(
            f"{option} {text!r} is not an ISO date or time; use e.g. 2026-10-25 or 2026-10-25T14:00"
        )
    return iso(moment.astimezone(UTC))


def cost_report(
    repo: Path,
    *,
    run_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
    time_zone: str | None = None,
    runs_per_day: float | None = None,
    parallel: bool = False,
) -> CostReport:
    """The report over the repository's traces (raises InputError on a bad parameter or config).

    `parallel`: fold big histories in worker processes (the CLI; a server never forks its
    threads, docs/performance.md)."""
    settings = load_settings(repo)
    zone = resolve_zone(time_zone, settings.time_zone)
    lower = parse_bound(since, zone, option="--since") if since else None
    upper = parse_bound(until, zone, option="--until", end=True) if until else None
    if lower is not None and upper is not None and lower >= upper:
        raise InputError(f"--since {since!r} is not before --until {until!r}; swap or widen them")
    if runs_per_day is not None and not runs_per_day > 0:
        raise InputError(f"--runs-per-day {runs_per_day:g} must be a positive number")
    if run_id is not None and (not run_id or "/" in run_id or "\\" in run_id or run_id in (".", "..")):
        raise InputError(f"--run {run_id!r} is not a run id; `flowd status` lists the runs")
    if run_id is not None and not (runs_dir(repo) / run_id).is_dir():
        raise InputError(f"no run {run_id!r} in {runs_dir(repo)}; `flowd status` lists the runs")
    report = _report(repo, run_id, settings, zone, (lower, upper), runs_per_day, parallel=parallel)
    if report.executor_ids:
        report.hidden_requests = hidden_requests(repo, report.executor_ids)
    return report


def _report(
    repo: Path,
    run_id: str | None,
    settings: Settings,
    zone: tzinfo,
    bounds: tuple[str | None, str | None],
    runs_per_day: float | None,
    *,
    parallel: bool,
) -> CostReport:
    """The report over the repository's traces, folded here or in worker processes (the same
    reader either way: `flowd.cost.aggregate`)."""
    from flowd.cost.parallel import fold_files, workers_for

    stats = ScanStats()
    files = trace_files(repo, run_id)
    lower, upper = bounds
    folded = fold_files(
        files,
        stats,
        settings=settings,
        zone=zone,
        since=lower,
        until=upper,
        run_id=run_id,
        workers=workers_for(files) if parallel else 1,
    )
    return report_from_fold(folded, tz=zone, runs_per_day=runs_per_day, stats=stats, run_id=run_id)


def cost_report_for(
    repo: Path,
    *,
    run_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
    time_zone: str | None = None,
    fmt: str = "json",
    runs_per_day: float | None = None,
) -> dict[str, Any] | str:
    """For `flow/costReport`: the report as a dict (fmt json) or text (`text`, `markdown`)."""
    kind = FORMATS.get(fmt)
    if kind is None:
        raise InputError(f"format {fmt!r} is not one of json, text, markdown")
    report = cost_report(
        repo, run_id=run_id, since=since, until=until, time_zone=time_zone, runs_per_day=runs_per_day
    )
    return report.wire() if kind == "json" else render(report, kind)


def report_text(repo: Path, params: dict[str, Any]) -> str:
    """What `flowd cost` prints for `params` ({fmt, run, since, until, tz, runsPerDay})."""
    report = cost_report(
        repo,
        run_id=params.get("run"),
        since=params.get("since"),
        until=params.get("until"),
        time_zone=params.get("tz"),
        runs_per_day=params.get("runsPerDay"),
        parallel=True,
    )
    return render(report, str(params.get("fmt", "text")))


def cost_command(args: argparse.Namespace) -> int:
    from flowd.daemon.client import request

    fmt = "json" if getattr(args, "json", False) else "md" if getattr(args, "md", False) else "text"
    params = {
        "fmt": fmt,
        "run": getattr(args, "run", None),
        "since": getattr(args, "since", None),
        "until": getattr(args, "until", None),
        "tz": getattr(args, "tz", None),
        "runsPerDay": getattr(args, "runs_per_day", None),
    }
    root = repo_root(strict=True)
    # The repository's daemon answers when one runs (docs/editors.md); the same text either way.
    answered = request(root, "cost", params)
    text = answered.get("text") if answered else None
    sys.stdout.write(text if isinstance(text, str) else report_text(root, params))
    sys.stdout.flush()
    return EXIT_OK
