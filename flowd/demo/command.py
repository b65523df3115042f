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
    # Kept after the run so the epic branch, worktrees, report and trace can be looked at.
    return _demo(Path(tempfile.mkdtemp(prefix="flowd-demo-")) / "calc", console, json_lines=args.json)


def _demo(target: Path, console: Console, *, json_lines: bool) -> int:
    repo, plan = build_sample_repo(target)
    console.print(f"[bold]flowd demo[/bold]: sample repository at {repo}, epic {plan.name}")
    result = execute(RunOptions(plan=plan, cwd=repo), json_lines=json_lines, console=console)
    if json_lines:
        return result.exit_code
    # Plain text on stdout (no wrapping): the report and the cost are meant to be read and piped.
    sys.stdout.write(result.report_path.read_text(encoding="utf-8") + "\n")
    sys.stdout.write(str(cost_report_for(repo, run_id=result.run_id, fmt="text")) + "\n")
    sys.stdout.write(
        f"Outcome {result.outcome}. The sample repository is kept at {repo} (epic branch "
        f"`{result.view.epic_branch}`; try `cd {repo} && flowd status`); delete it when done.\n"
    )
    return result.exit_code
