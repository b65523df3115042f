"""`flowd status`: active and recent runs with their lanes, folded from their traces."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flowd.base.errors import FlowdError
from flowd.control.shapes import status_wire
from flowd.cost.prices import pricer
from flowd.store.config import load_settings
from flowd.trace.log import fold_trace, is_active, list_runs, trace_path
from flowd.trace.view import RunView
from flowd.vcs.gitops import Repo

RECENT = 10


def run_views(repo: Path, limit: int = RECENT) -> list[RunView]:
    """The fold of each recent run; a run whose runner died without ending is `interrupted`."""
    try:
        price = pricer(load_settings(repo))
    except FlowdError:
        price = pricer(None)
    views: list[RunView] = []
    for record in list_runs(repo)[:limit]:
        view = fold_trace(trace_path(repo, record.run_id), RunView(run_id=record.run_id, pricer=price))
        view.epic_id = view.epic_id or record.epic_id
        view.plan = view.plan or record.plan
        view.started_at = record.started_at
        if view.status == "running" and not is_active(record):
            view.status = "interrupted"
        views.append(view)
    return views


def status_command(args: argparse.Namespace) -> int:
    repo = Repo.discover(Path.cwd())
    views = run_views(repo.root)
    if args.json:
        print(json.dumps({"runs": [status_wire(v) for v in views]}, indent=2))
        return 0
    # rich only for people: `--json` (scripts, the benchmarks) does without it (docs/performance.md).
    from rich.console import Console

    from flowd.control.progress import plain_run, render_run

    if not views:
        print("No runs yet. Start one with `flowd run PLAN` (or `flowd demo`).")
        return 0
    if not sys.stdout.isatty():
        # A pipe or a file: plain lines that never wrap (rich would wrap at 80 columns).
        for view in views:
            print(f"{view.run_id}  started {view.started_at}")
            print("\n".join(plain_run(view)) + "\n")
        return 0
    console = Console()
    for view in views:
        console.print(f"[bold]{view.run_id}[/bold]  started {view.started_at}")
        console.print(render_run(view))
        console.print()
    return 0
