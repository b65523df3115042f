"""CLI commands of the engine: `flowd run`, `flowd check`, `flowd cancel`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.live import Live

from flowd.base.errors import FlowdError, InputError
from flowd.control.progress import PlainProgress, render_run, said_at_start
from flowd.cost.prices import pricer
from flowd.engine.core.pause import AnswerRefused, parse_pause_on
from flowd.engine.perimeter_now import perimeter_now
from flowd.engine.runctl import cancel_run
from flowd.engine.runner import RunOptions, RunResult, run_epic
from flowd.engine.state import EpicPaths, all_states
from flowd.events.model import Envelope, dump_envelope
from flowd.plan.parse import load_plan
from flowd.store.config import load_settings
from flowd.trace.log import list_runs
from flowd.trace.view import RunView
from flowd.vcs.gitops import Repo


def execute(options: RunOptions, *, json_lines: bool, out: TextIO | None = None) -> RunResult:
    """Run an epic showing its progress on `out` (stdout by default), or JSON lines of events.

    The first line is `run <runId>` (`flowd cancel` takes it). On a terminal the progress is a live
    table; elsewhere one plain line per state change, flushed as it happens (docs/running.md).
    """
    if json_lines:

        def print_line(envelope: Envelope) -> None:
            sys.stdout.buffer.write(dump_envelope(envelope) + b"\n")
            sys.stdout.flush()

        options.on_event = print_line
        return asyncio.run(run_epic(options))
    stream = out or sys.stdout
    if not stream.isatty():
        return _execute_plain(options, stream)
    console = Console(file=stream)
    view: list[RunView] = []

    async def main() -> RunResult:
        with Live(console=console, refresh_per_second=8, transient=False) as live:

            def show(envelope: Envelope) -> None:
                if not view:
                    view.append(_view(envelope.run_id, options))
                    live.console.print(f"run {envelope.run_id}", markup=False, highlight=False)
                view[0].apply(envelope)
                said = said_at_start(envelope.event)
                if said is not None:
                    live.console.print(said, markup=False, highlight=False)
                live.update(render_run(view[0]))

            options.on_event = show
            result = await run_epic(options)
            live.update(render_run(result.view))
            return result

    return asyncio.run(main())


def _view(run_id: str, options: RunOptions) -> RunView:
    """An empty fold priced like the runner's (the run has validated the settings by now)."""
    try:
        price = pricer(load_settings(Repo.discover(options.cwd).root))
    except FlowdError:
        price = pricer(None)
    return RunView(run_id=run_id, pricer=price)


def _execute_plain(options: RunOptions, stream: TextIO) -> RunResult:
    view: list[RunView] = []
    progress = PlainProgress()
    gone: list[OSError] = []

    def show(envelope: Envelope) -> None:
        if not view:
            view.append(_view(envelope.run_id, options))
            lines = [f"run {envelope.run_id}"]
        else:
            lines = []
        view[0].apply(envelope)
        if gone:
            return
        try:
            stream.write("".join(line + "\n" for line in [*lines, *progress.lines(view[0], envelope)]))
            stream.flush()
        except OSError as exc:  # the reader went away (`| head`): the run goes on, unprinted
            gone.append(exc)
            with contextlib.suppress(OSError, ValueError):
                # Later writes (the outcome line, the exit-time flush) go nowhere instead of failing.
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())

    options.on_event = show
    return asyncio.run(run_epic(options))


def run_command(args: argparse.Namespace) -> int:
    if args.concurrency is not None and args.concurrency < 1:
        raise InputError("--concurrency must be at least 1")
    pause_on: list[str] | None = None
    if getattr(args, "pause_on", None) is not None:
        try:
            pause_on = [str(reason) for reason in parse_pause_on(args.pause_on)]
        except AnswerRefused as exc:
            raise InputError(str(exc)) from None
    options = RunOptions(
        pause_on=pause_on,
        plan=Path(args.plan),
        run_id=args.run_id,
        concurrency=args.concurrency,
        fail_fast=args.fail_fast,
        budget_usd=args.budget_usd,
        base=args.base,
        reap_in_background=True,  # the prompt comes back once the outcome is written
    )
    result = execute(options, json_lines=args.json)
    if not result.fresh:
        note = (
            f"nothing to run: every story of epic {result.report.epic_id} is merged into "
            f"{result.report.epic_branch} (by run {result.run_id}); report at {result.report_path}"
        )
        # --json keeps stdout for events (there are none): the sentence goes to stderr.
        print(
            note if args.json else f"run {result.run_id}\n{note}",
            file=sys.stderr if args.json else sys.stdout,
        )
        return result.exit_code
    if not args.json:
        print(f"{result.outcome}: report at {result.report_path}", flush=True)
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
    from flowd.daemon.client import request

    repo = Repo.discover(Path.cwd())
    # Through the repository's daemon when one runs (docs/editors.md): its sessions hear at once.
    answered = (
        request(repo.root, "cancel", {"runId": args.run_id}) if repo.git_dir == repo.common_dir else None
    )
    outcome = answered.get("outcome") if answered else None
    if not isinstance(outcome, str):
        outcome = cancel_run(repo.root, args.run_id)
    print(f"{args.run_id}: {outcome}")
    return 0
