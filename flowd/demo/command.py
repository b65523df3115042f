"""`flowd demo`: build the sample repository, run its epic end to end, print the report and cost."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from flowd.base.errors import InputError
from flowd.control.run import execute
from flowd.cost.cli import cost_report_for
from flowd.demo.sample import build_sample_repo
from flowd.engine.runner import RunOptions


def demo_command(args: argparse.Namespace) -> int:
    if args.dir:
        target = Path(args.dir).absolute()
        if target.exists() and any(target.iterdir()):
            raise InputError(f"--dir {target} is not empty; give a new or empty directory")
        return _demo(target, json_lines=args.json)
    # Kept after the run so the epic branch, worktrees, report and trace can be looked at.
    return _demo(Path(tempfile.mkdtemp(prefix="flowd-demo-")) / "calc", json_lines=args.json)


def _demo(target: Path, *, json_lines: bool) -> int:
    repo, plan = build_sample_repo(target)
    if not json_lines:
        print(f"flowd demo: sample repository at {repo}, epic {plan.name}", flush=True)
    result = execute(RunOptions(plan=plan, cwd=repo), json_lines=json_lines)
    if json_lines:
        return result.exit_code
    # Plain text on stdout (no wrapping): the report and the cost are meant to be read and piped.
    sys.stdout.write("\n" + result.report_path.read_text(encoding="utf-8") + "\n")
    sys.stdout.write(str(cost_report_for(repo, run_id=result.run_id, fmt="text")) + "\n")
    sys.stdout.write(
        f"Outcome {result.outcome}. The sample repository is kept at {repo} (epic branch "
        f"`{result.view.epic_branch}`; try `cd {repo} && {flowd_command()} status`); delete it when done.\n"
    )
    sys.stdout.flush()
    return result.exit_code


def flowd_command() -> str:
    """How to call this flowd from a new shell: `flowd` when PATH finds this one, else its full path."""
    script = Path(sys.argv[0]).absolute() if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "flowd" and script.is_file():
        found = shutil.which("flowd")
        if found is not None and Path(found).resolve() == script.resolve():
            return "flowd"
        return shlex.quote(str(script))
    found = shutil.which("flowd")
    return "flowd" if found else f"{shlex.quote(sys.executable)} -m flowd"
