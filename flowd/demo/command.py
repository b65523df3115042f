"""`flowd demo`: build the sample repository, run its epic end to end, print the report and cost."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from flowd.cost.cli import cost_report_for
from flowd.demo.sample import build_sample_repo
from flowd.engine.cli import execute
from flowd.engine.runner import RunOptions
from flowd.errors import InputError


def demo_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    if args.dir:
        target = Path(args.dir).absolute()
        if target.exists() and any(target.iterdir()):
            raise InputError(f"--dir {target} is not empty; give a new or empty directory")
        return _demo(target, console, json_lines=args.json)
    with tempfile.TemporaryDirectory(prefix="flowd-demo-") as tmp:
        return _demo(Path(tmp) / "calc", console, json_lines=args.json)


def _demo(target: Path, console: Console, *, json_lines: bool) -> int:
    repo, plan = build_sample_repo(target)
    console.print(f"[bold]flowd demo[/bold]: sample repository at {repo}, epic {plan.name}")
    result = execute(RunOptions(plan=plan, cwd=repo), json_lines=json_lines, console=console)
    if json_lines:
        return result.exit_code
    # Plain text on stdout (no wrapping): the report and the cost are meant to be read and piped.
    sys.stdout.write(result.report_path.read_text(encoding="utf-8") + "\n")
    sys.stdout.write(str(cost_report_for(repo, run_id=result.run_id, fmt="text")) + "\n")
    sys.stdout.write(f"Epic branch `{result.view.epic_branch}` in {repo}: outcome {result.outcome}.\n")
    return result.exit_code
