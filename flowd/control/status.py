"""`flowd status`: active and recent runs with their lanes, folded from their traces, or from the
repository's daemon's folds when one runs (the same text either way; docs/editors.md)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported where used: through the daemon `flowd status` needs none of them (docs/editors.md).
    from flowd.trace.log import RunRecord
    from flowd.trace.usage import Pricer
    from flowd.trace.view import RunView

RECENT = 10
EMPTY = "No runs yet. Start one with `flowd run PLAN` (or `flowd demo`)."


def fold_view(repo: Path, record: RunRecord, price: Pricer) -> RunView:
    """One run's fold from its trace; a run whose runner died without ending is `interrupted`."""
    from flowd.trace.log import fold_trace, is_active, trace_path
    from flowd.trace.view import RunView

    view = fold_trace(trace_path(repo, record.run_id), RunView(run_id=record.run_id, pricer=price))
    view.epic_id = view.epic_id or record.epic_id
    view.plan = view.plan or record.plan
    view.started_at = record.started_at
    if view.status == "running" and not is_active(record):
        view.status = "interrupted"
    return view


def run_views(repo: Path, limit: int = RECENT) -> list[RunView]:
    """The fold of each recent run."""
    from flowd.base.errors import FlowdError
    from flowd.cost.prices import pricer
    from flowd.store.config import load_settings
    from flowd.trace.log import list_runs

    try:
        price = pricer(load_settings(repo))
    except FlowdError:
        price = pricer(None)
    return [fold_view(repo, record, price) for record in list_runs(repo)[:limit]]


def render(
    views: list[RunView],
    *,
    json_out: bool,
    tty: bool,
    width: int | None = None,
    color_system: str | None = None,
) -> str:
    """What `flowd status` prints: JSON, plain lines for a pipe, or rich for a terminal."""
    from flowd.control.shapes import status_wire

    if json_out:
        return json.dumps({"runs": [status_wire(v) for v in views]}, indent=2) + "\n"
    if not views:
        return EMPTY + "\n"
    from flowd.control.progress import plain_run, render_run

    if not tty:
        # A pipe or a file: plain lines that never wrap (rich would wrap at 80 columns).
        return "".join(
            f"{v.run_id}  started {v.started_at}\n" + "\n".join(plain_run(v)) + "\n\n" for v in views
        )
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width, color_system=color_system)  # type: ignore[arg-type]
    for view in views:
        console.print(f"[bold]{view.run_id}[/bold]  started {view.started_at}")
        console.print(render_run(view))
        console.print()
    return out.getvalue()


def status_command(args: argparse.Namespace) -> int:
    from flowd.daemon.client import daemon_root, request

    tty = not args.json and sys.stdout.isatty()
    width, color_system = None, None
    if tty:
        # rich only for people: `--json` (scripts, the benchmarks) does without it (docs/performance.md).
        from rich.console import Console

        here = Console()
        width, color_system = here.width, here.color_system
    params = {"json": bool(args.json), "tty": tty, "width": width, "colorSystem": color_system}
    # The repository's daemon (docs/editors.md) has the runs folded already; without one, fold here.
    root = daemon_root(Path.cwd())
    answered = request(root, "status", params) if root is not None else None
    text = answered.get("text") if answered else None
    if not isinstance(text, str):
        from flowd.vcs.gitops import Repo

        repo = Repo.discover(Path.cwd())
        text = render(
            run_views(repo.root), json_out=bool(args.json), tty=tty, width=width, color_system=color_system
        )
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
