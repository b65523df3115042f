"""CLI commands of the engine: `flowd run`, `flowd check`, `flowd cancel`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.live import Live

from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.runner import RunOptions, RunResult, run_epic
from flowd.engine.state import EpicPaths, all_states
from flowd.errors import EXIT_BAD_INPUT
from flowd.events import Envelope, dump_envelope
from flowd.gitops import Repo
from flowd.plan.parse import load_plan
from flowd.progress import render_run
from flowd.runctl import cancel_run
from flowd.trace import list_runs
from flowd.view import RunView


def execute(options: RunOptions, *, json_lines: bool, console: Console | None = None) -> RunResult:
    """Run an epic with live progress on stderr (or JSON lines of events on stdout)."""
    if json_lines:

        def print_line(envelope: Envelope) -> None:
            sys.stdout.buffer.write(dump_envelope(envelope) + b"\n")
            sys.stdout.flush()

        options.on_event = print_line
        return asyncio.run(run_epic(options))
    console = console or Console(stderr=True)
    live_view: list[RunView] = []

    async def main() -> RunResult:
        with Live(console=console, refresh_per_second=8, transient=False) as live:

            def show(envelope: Envelope) -> None:
                if not live_view:
                    live_view.append(RunView(run_id=envelope.run_id))
                live_view[0].apply(envelope)
                live.update(render_run(live_view[0]))

            options.on_event = show
            result = await run_epic(options)
            live.update(render_run(result.view))
            return result

    return asyncio.run(main())


def run_command(args: argparse.Namespace) -> int:
    if args.concurrency is not None and args.concurrency < 1:
        print("flowd: --concurrency must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    options = RunOptions(
        plan=Path(args.plan),
        run_id=args.run_id,
        concurrency=args.concurrency,
        fail_fast=args.fail_fast,
        budget_usd=args.budget_usd,
        base=args.base,
    )
    result = execute(options, json_lines=args.json)
    if not args.json:
        print(f"{result.outcome}: report at {result.report_path}", file=sys.stderr)
    return result.exit_code


def check_command(args: argparse.Namespace) -> int:
    """Perimeter violations in the story worktrees of the repository's epics, now."""
    repo = Repo.discover(Path.cwd())
    found: list[dict[str, object]] = []
    seen: set[str] = set()
    for record in list_runs(repo.root):
        if record.epic_id in seen:
            continue
        seen.add(record.epic_id)
        try:
            plan = load_plan(Path(record.plan))
        except Exception:
            continue
        for state in all_states(EpicPaths(repo.root, record.epic_id)):
            worktree = Path(state.worktree)
            if state.status == "merged" or not (worktree / ".git").exists() or plan.story(state.id) is None:
                continue
            for path in perimeter_now(repo, plan, state.id, worktree):
                found.append(
                    {
                        "epicId": record.epic_id,
                        "story": state.id,
                        "path": path.path,
                        "kind": path.kind,
                        "worktree": str(worktree),
                    }
                )
    if args.json:
        print(json.dumps({"violations": found}, indent=2))
    else:
        for item in found:
            print(
                f"{item['worktree']}/{item['path']}: {item['kind']} (story {item['story']} of {item['epicId']})"
            )
        print(f"{len(found)} perimeter violation(s)", file=sys.stderr)
    return 1 if found else 0


def cancel_command(args: argparse.Namespace) -> int:
    repo = Repo.discover(Path.cwd())
    outcome = cancel_run(repo.root, args.run_id)
    print(f"{args.run_id}: {outcome}")
    return 0
