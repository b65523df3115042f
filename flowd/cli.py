"""The `flowd` command line (docs/running.md): argument parsing and dispatch only.

Each command lives in the module of its concept and is named here by import path, so this file
stays a table. A command function takes the parsed arguments and returns the exit code; a
`FlowdError` becomes one line on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TypeAlias, cast

from flowd import __version__
from flowd.base.errors import EXIT_BAD_INPUT, EXIT_CANCELLED, FlowdError

Command = Callable[[argparse.Namespace], int]


EXIT_CODES = {
    "run": "0 every story done · 1 a story failed or is waiting · 2 bad input (plan, roster, config, "
    "not a git repository) · 3 halted (budget spent, no executor) · 130 cancelled",
    "validate": "0 valid · 2 invalid or unreadable",
    "new": "0 drafted · 2 bad input, or the planner's plan stayed invalid",
    "status": "0 · 2 not a git repository",
    "cost": "0 · 2 bad option or not a git repository",
    "check": "0 no violation · 1 some · 2 not a git repository",
    "cancel": "0 stopped or already ended · 2 unknown run",
    "answer": "0 answered · 2 nothing paused there, an answer that does not fit the pause, or a run not running",
    "revise": "0 the story takes the revision · 2 bad PATH:LINE, unknown run, story, file or line, "
    "or the story has merged (one sentence says which; nothing changed)",
    "clean": "0 · 2 not a git repository; with --epic: unknown or unfinished epic, or a run of it is alive",
    "demo": "as flowd run (0 when the sample epic is done)",
    "serve": "0 when the client shuts it down · 2 bad option",
    "daemon": "as its subcommand · 2 without one",
    "daemon status": "0 a daemon runs · 1 none runs · 2 not a git repository",
    "daemon stop": "0 stopped, or none ran · 2 not a git repository",
    "web": "0 the page is served · 1 the daemon could not start or listen · 2 not a git repository",
    "script": "0 when its client closes stdin · 2 unreadable script",
    "roster check": "0 every executor answered · 1 one did not · 2 bad roster",
    "schema": "0",
    "plan": "as its subcommand · 2 without one",
    "agent": "as its subcommand · 2 without one",
    "roster": "as its subcommand · 2 without one",
}
# A command's examples in its --help (a tuple: several, each on its line).
EXAMPLES: dict[str, str | tuple[str, ...]] = {
    "run": "flowd run auth.epic.json --concurrency 2 --budget-usd 5",
    "validate": "flowd plan validate auth.epic.json",
    "new": 'flowd plan new "Add password login" -o auth.epic.json',
    "status": "flowd status --json | jq '.runs[0].lanes'",
    "cost": "flowd cost --since 2026-11-01 --until 2026-11-30 --tz Europe/Rome",
    "check": "flowd check",
    "cancel": "flowd cancel auth-20261129T140307-1a2b",
    "answer": (
        "flowd answer auth-20261129T140307-1a2b raise 5",
        "flowd answer auth-20261129T140307-1a2b --story api approve",
        'flowd answer auth-20261129T140307-1a2b --story api "use the session helper"',
    ),
    "revise": 'flowd revise auth-20261129T140307-1a2b api src/api/login.py:12 "return 401, not 500"',
    "clean": "flowd clean --epic auth --dry-run",
    "demo": "flowd demo --dir /tmp/calc",
    "serve": "flowd serve --tcp --port 2087",
    "daemon": "flowd daemon status --json",
    "daemon status": "flowd daemon status --json",
    "daemon stop": "flowd daemon stop",
    "web": "flowd web --no-open --port 8765",
    "script": "flowd agent script --script .flow/demo.script.json",
    "roster check": "flowd roster check --role coder",
    "schema": "flowd schema plan > plan.schema.json",
    "plan": "flowd plan validate auth.epic.json",
    "agent": "flowd agent script --script .flow/demo.script.json",
    "roster": "flowd roster check",
}


def _epilog(key: str) -> str:
    given = EXAMPLES[key]
    examples = (given,) if isinstance(given, str) else given
    heading = "example" if len(examples) == 1 else "examples"
    lines = "".join(f"\n  {line}" for line in examples)
    return f"exit codes: {EXIT_CODES[key]}\n{heading}:{lines}"


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _command(
    into: Subparsers, name: str, target: str, help_text: str, key: str | None = None
) -> argparse.ArgumentParser:
    """One command: its help, exit codes and example (under `key`, default its name), its target."""
    p = into.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=_epilog(key or name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(target=target)
    return p


def _group(into: Subparsers, name: str, help_text: str, dest: str, metavar: str) -> Subparsers:
    """A command that only holds subcommands; given none, `main` prints its help (exit 2)."""
    p = into.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=_epilog(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(target=None, subparser=p)
    return p.add_subparsers(dest=dest, metavar=metavar, help="one of:")


def _add_serve(sub: Subparsers) -> None:
    p = _command(sub, "serve", "flowd.server.main:serve_command", "the language server (stdio by default)")
    p.add_argument(
        "--tcp", action="store_true", help="listen on TCP instead of stdio (a client must send a token)"
    )
    p.add_argument("--host", default="127.0.0.1", help="TCP address; loopback only (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=2087, help="TCP port; 0 picks a free one (default: 2087)")
    p.add_argument(
        "--no-daemon",
        action="store_true",
        help="serve this one editor in-process instead of through the repository's daemon",
    )


def _add_daemon(sub: Subparsers) -> None:
    group = _group(sub, "daemon", "the repository's shared daemon", "daemon_command", "{status,stop}")
    p = _command(
        group,
        "status",
        "flowd.daemon.commands:status_command",
        "the daemon: pid, version, sessions, runs",
        "daemon status",
    )
    p.add_argument("--json", action="store_true", help="one JSON object")
    _command(
        group,
        "stop",
        "flowd.daemon.commands:stop_command",
        "end the daemon (sessions are told; runs go on)",
        "daemon stop",
    )


def _add_web(sub: Subparsers) -> None:
    p = _command(sub, "web", "flowd.daemon.commands:web_command", "the live page of the repository's runs")
    p.add_argument("--no-open", action="store_true", help="print the URL without opening a browser")
    p.add_argument(
        "--port",
        type=int,
        default=0,
        metavar="P",
        help="the page's port on 127.0.0.1 (default: any free one)",
    )


def _add_run(sub: Subparsers) -> None:
    p = _command(sub, "run", "flowd.control.run:run_command", "run or resume an epic")
    p.add_argument(
        "plan", metavar="PLAN", help="the story plan (*.epic.json, or Markdown with a json storyplan block)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="stories at once (default: concurrency in .flow/config.toml, else 3)",
    )
    p.add_argument(
        "--fail-fast", action="store_true", default=None, help="the first failed story stops the others"
    )
    p.add_argument(
        "--budget-usd",
        type=float,
        metavar="X",
        help="epic budget in USD: no new task or story starts once spent",
    )
    p.add_argument(
        "--run-id",
        metavar="ID",
        help="name the run (default: <epicId>-<time>-<hex>); the same id continues its trace",
    )
    p.add_argument("--base", metavar="REF", help="start the epic branch from this ref (default: HEAD)")
    p.add_argument(
        "--pause-on",
        metavar="REASONS",
        help="wait for `flowd answer` instead of halting on these (comma-separated: budget, blocked, "
        "noExecutor, merge (approve each story before it merges); default: pauseOn in .flow/config.toml, else none)",
    )
    p.add_argument(
        "--json", action="store_true", help="print every event as a JSON line on stdout instead of progress"
    )


def _add_plan(sub: Subparsers) -> None:
    plan_sub = _group(sub, "plan", "validate or draft a story plan", "plan_command", "SUBCOMMAND")
    p = _command(
        plan_sub, "validate", "flowd.control.validate:validate_command", "print every violation of a plan"
    )
    p.add_argument("plan", metavar="PLAN", help="the story plan file")
    p.add_argument("--json", action="store_true", help="print {plan, valid, violations} as JSON on stdout")
    p = _command(plan_sub, "new", "flowd.engine.draft:new_command", "draft a story plan with the planner")
    p.add_argument("text", nargs="?", default="", metavar="EPIC TEXT", help="the epic in a sentence")
    p.add_argument(
        "-o", "--output", required=True, metavar="PLAN", help="where to write the draft (.json or .md)"
    )
    p.add_argument("--brief", metavar="FILE", help="a Markdown brief used as the planner's input")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")


def _add_status(sub: Subparsers) -> None:
    p = _command(
        sub, "status", "flowd.control.status:status_command", "active and recent runs with their lanes"
    )
    p.add_argument("--json", action="store_true", help="print {runs: [...]} as JSON on stdout")


def _add_cost(sub: Subparsers) -> None:
    p = _command(sub, "cost", "flowd.cost.cli:cost_command", "the cost report over the repository's traces")
    p.add_argument("--run", metavar="ID", help="only this run (`flowd status` lists run ids)")
    p.add_argument(
        "--since",
        metavar="T",
        help="from this ISO date or time, e.g. 2026-11-01 or 2026-11-01T14:00 (in --tz)",
    )
    p.add_argument(
        "--until", metavar="T", help="up to this ISO date (the whole day included) or time (exclusive)"
    )
    p.add_argument(
        "--tz",
        metavar="ZONE",
        help="IANA time zone of days and hours, e.g. Europe/Rome (default: timeZone in config, else local)",
    )
    p.add_argument(
        "--runs-per-day", type=float, metavar="N", help="project the cost at this many runs per day"
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the report as JSON")
    fmt.add_argument("--md", action="store_true", help="print the report as Markdown")


def _add_check(sub: Subparsers) -> None:
    p = _command(
        sub, "check", "flowd.control.run:check_command", "perimeter violations in story worktrees now"
    )
    p.add_argument("--json", action="store_true", help="print {violations: [...]} as JSON on stdout")


def _add_cancel(sub: Subparsers) -> None:
    p = _command(
        sub, "cancel", "flowd.control.run:cancel_command", "stop a run gracefully (run it again to resume)"
    )
    p.add_argument(
        "run_id",
        metavar="RUN_ID",
        help="the run to stop (`flowd run` prints it first; `flowd status` lists them)",
    )


def _add_answer(sub: Subparsers) -> None:
    p = _command(
        sub, "answer", "flowd.control.answer:answer_command", "answer a paused story or run (docs/answers.md)"
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the paused run (`flowd status` lists them)")
    p.add_argument(
        "text",
        nargs="+",
        metavar="TEXT",
        help="`raise N`, `stop`, `wait`, `approve` (a story waiting to merge), or what the coder needs",
    )
    p.add_argument(
        "--story", metavar="ID", help="the paused story (without: the run's own pause, the budget)"
    )


def _add_revise(sub: Subparsers) -> None:
    p = _command(
        sub,
        "revise",
        "flowd.control.revise:revise_command",
        "a review comment on a line of a story's change becomes a revision task for its coder",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the live run (`flowd status` lists them)")
    p.add_argument("story", metavar="STORY", help="the story to revise (not merged yet)")
    p.add_argument(
        "location",
        metavar="PATH:LINE",
        help="the file, relative to the repository (or absolute, in the story's worktree), and its line from 1",
    )
    p.add_argument("text", metavar="TEXT", nargs="+", help="the comment: what the coder should change")


def _add_clean(sub: Subparsers) -> None:
    p = _command(sub, "clean", "flowd.engine.clean:clean_command", "remove merged and forgotten worktrees")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed; change nothing")
    p.add_argument(
        "--epic",
        metavar="ID",
        help="retire this finished epic: remove its _epic worktree and its stories' worktrees and branches, "
        "keep epic/<ID>",
    )


def _add_demo(sub: Subparsers) -> None:
    p = _command(sub, "demo", "flowd.demo:demo_command", "run the scripted sample epic end to end")
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="where to build the sample repository (new or empty; default: a temp dir)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the run's events as JSON lines instead of progress and report",
    )


def _add_agent(sub: Subparsers) -> None:
    agent_sub = _group(sub, "agent", "bundled agents", "agent_command", "AGENT")
    p = _command(
        agent_sub, "script", "flowd.agents.script_agent:agent_command", "the scripted ACP agent (on stdio)"
    )
    p.add_argument(
        "--script",
        required=True,
        metavar="FILE",
        help="the script the agent follows (docs/scripted-agent.md)",
    )


def _add_roster(sub: Subparsers) -> None:
    roster_sub = _group(sub, "roster", "inspect the roster", "roster_command", "SUBCOMMAND")
    p = _command(
        roster_sub,
        "check",
        "flowd.roster.check:check_command",
        "run a one-line prompt on each executor",
        key="roster check",
    )
    p.add_argument("--role", help="only executors serving this role (planner, coder, reviewer, judge)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")


def _add_schema(sub: Subparsers) -> None:
    p = _command(
        sub,
        "schema",
        "flowd.schema.json_schema:schema_command",
        "print the JSON Schema of a file or the LSP protocol",
    )
    p.add_argument(
        "what",
        choices=["plan", "roster", "config", "script", "trace", "protocol"],
        help="which file's schema to print (protocol: the language server's custom methods)",
    )


# The commands in the order `flowd --help` lists them; a new command is one `_add_*` function here.
SUBCOMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    _add_serve,
    _add_daemon,
    _add_web,
    _add_run,
    _add_plan,
    _add_status,
    _add_cost,
    _add_check,
    _add_cancel,
    _add_answer,
    _add_revise,
    _add_clean,
    _add_demo,
    _add_agent,
    _add_roster,
    _add_schema,
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowd",
        description="Run a team of LLM coding agents on your repository.",
        epilog="exit codes: 0 ok · 1 failed · 2 bad input · 3 halted · 130 cancelled "
        "(each command's --help says which it uses)\nexample:\n  flowd demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"flowd {__version__}")
    parser.add_argument(
        "--repo", default=None, metavar="DIR", help="the repository (default: the one holding the cwd)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="one of:")
    for add in SUBCOMMANDS:
        add(sub)
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


def report_error(exc: FlowdError, *, json_out: bool) -> None:
    """The error for people on stderr; with `--json`, also as `{"error", "exitCode"}` on stdout.

    A one-line message reads `flowd: ...`; a multi-line one (a plan's violations, one per line as
    `PLAN:LINE:COL: message`) is printed as is, so every command shows plan errors alike.
    """
    text = str(exc)
    print(text if "\n" in text else f"flowd: {text}", file=sys.stderr)
    if json_out:
        document: dict[str, object] = {"error": text.splitlines()[-1], "exitCode": exc.exit_code}
        found = getattr(exc, "violations", None)
        if isinstance(found, list):
            document["violations"] = [v.wire() for v in found if hasattr(v, "wire")]
        print(json.dumps(document, ensure_ascii=False), flush=True)


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
        report_error(exc, json_out=bool(getattr(args, "json", False)))
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
