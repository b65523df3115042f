"""The `flowd` command line (contract §5): argument parsing and dispatch only.

Each command lives in the module of its concept and is named here by import path, so this file
stays a table. A command function takes the parsed arguments and returns the exit code; a
`FlowdError` becomes one line on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import cast

from flowd import __version__
from flowd.errors import EXIT_BAD_INPUT, EXIT_CANCELLED, FlowdError

Command = Callable[[argparse.Namespace], int]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowd", description="Run a team of LLM coding agents on your repository."
    )
    parser.add_argument("--version", action="version", version=f"flowd {__version__}")
    parser.add_argument("--repo", default=None, help="the repository (default: the one holding the cwd)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(
        name: str,
        target: str,
        help_text: str,
        into: argparse._SubParsersAction[argparse.ArgumentParser] = sub,
    ) -> argparse.ArgumentParser:
        p = into.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(target=target)
        return p

    p = command("serve", "flowd.server.main:serve_command", "the language server (stdio by default)")
    p.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=2087)

    p = command("run", "flowd.engine.cli:run_command", "run or resume an epic")
    p.add_argument("plan")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--fail-fast", action="store_true", default=None)
    p.add_argument("--budget-usd", type=float)
    p.add_argument("--run-id")
    p.add_argument("--base", help="start the epic branch from this ref (default: HEAD)")
    p.add_argument("--json", action="store_true", help="print events as JSON lines")

    plan = sub.add_parser("plan", help="validate or draft a story plan")
    plan_sub = plan.add_subparsers(dest="plan_command", metavar="SUBCOMMAND")
    plan.set_defaults(target=None, subparser=plan)
    p = command("validate", "flowd.plan.cli:validate_command", "print every violation of a plan", plan_sub)
    p.add_argument("plan")
    p.add_argument("--json", action="store_true")
    p = command("new", "flowd.plan.draft:new_command", "draft a story plan with the planner", plan_sub)
    p.add_argument("text", nargs="?", default="")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--brief", help="a Markdown brief used as the planner's input")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")

    p = command("status", "flowd.status:status_command", "active and recent runs with their lanes")
    p.add_argument("--json", action="store_true")

    p = command("cost", "flowd.cost.cli:cost_command", "the cost report over the repository's traces")
    p.add_argument("--run")
    p.add_argument("--since")
    p.add_argument("--until")
    p.add_argument("--tz")
    p.add_argument("--runs-per-day", type=float, help="project the cost at this many runs per day")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--md", action="store_true")

    p = command("check", "flowd.engine.cli:check_command", "perimeter violations in story worktrees now")
    p.add_argument("--json", action="store_true")

    p = command("cancel", "flowd.engine.cli:cancel_command", "stop a run gracefully")
    p.add_argument("run_id")

    p = command("clean", "flowd.engine.clean:clean_command", "remove merged and forgotten worktrees")
    p.add_argument("--dry-run", action="store_true")

    p = command("demo", "flowd.demo:demo_command", "run the scripted sample epic end to end")
    p.add_argument("--dir", help="where to build the sample repository (default: a temp dir)")
    p.add_argument("--json", action="store_true")

    agent = sub.add_parser("agent", help="bundled agents")
    agent_sub = agent.add_subparsers(dest="agent_command", metavar="AGENT")
    agent.set_defaults(target=None, subparser=agent)
    p = command("script", "flowd.agents.script_agent:agent_command", "the scripted ACP agent", agent_sub)
    p.add_argument("--script", required=True)

    roster = sub.add_parser("roster", help="inspect the roster")
    roster_sub = roster.add_subparsers(dest="roster_command", metavar="SUBCOMMAND")
    roster.set_defaults(target=None, subparser=roster)
    p = command(
        "check", "flowd.roster_check:check_command", "run a one-line prompt on each executor", roster_sub
    )
    p.add_argument("--role", help="only executors serving this role")
    p.add_argument("--json", action="store_true")

    p = command("schema", "flowd.schema:schema_command", "print the JSON Schema of a file")
    p.add_argument("what", choices=["plan", "roster", "config", "script", "trace"])
    return parser


def _resolve(target: str) -> Command | None:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return None
        raise
    found = getattr(module, attr, None)
    return cast(Command, found) if callable(found) else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    target = getattr(args, "target", None)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    if target is None:
        sub = getattr(args, "subparser", parser)
        sub.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    if args.repo is not None:
        try:
            os.chdir(args.repo)
        except OSError as exc:
            print(f"flowd: --repo {args.repo}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_INPUT
    try:
        command = _resolve(target)
        if command is None:
            print(f"flowd {args.command}: not yet available in this version", file=sys.stderr)
            return EXIT_BAD_INPUT
        return command(args)
    except FlowdError as exc:
        print(f"flowd: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("flowd: interrupted", file=sys.stderr)
        return EXIT_CANCELLED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last line of defence: one sentence, the traceback only on request
        if os.environ.get("FLOWD_DEBUG"):
            traceback.print_exc()
        print(
            f"flowd: internal error: {type(exc).__name__}: {exc} (set FLOWD_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return 1
