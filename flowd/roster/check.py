"""`flowd roster check [--role R] [--json]`: one tiny prompt on every executor, to see who answers.

Each executor gets "Reply with the single word: ready" in a fresh temp directory (so no agent
touches the repository), as the given role or the first text role it serves. The verdict is the
executor's: a reply of any kind is ok; a failure is shown with its classified kind (the same one
that would exclude the executor in a run) and the time it took. Exit 0 when every executor
answered, 1 when some failed, 2 for a bad roster or an unknown role.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from flowd.agents.base import AgentError, FlowdMeta, TurnRequest
from flowd.agents.factory import make_executor
from flowd.base.errors import EXIT_FAILED, EXIT_OK, FlowdError, InputError
from flowd.base.wire import WireModel
from flowd.sandbox.confine import status_line
from flowd.store.config import ROLES, TEXT_ROLES, ExecutorSpec, load_roster, load_settings
from flowd.vcs.gitcli import toplevel
from flowd.vcs.repo import flow_outside_sparse

PROMPT = "Reply with the single word: ready"
DEFAULT_TIMEOUT_S = 180.0
_AT_ONCE = 4  # agents are heavy processes; the machine running the check may be small


class Failure(WireModel):
    kind: str
    message: str


class CheckResult(WireModel):
    id: str
    kind: str
    role: str
    ok: bool
    duration_ms: int
    reply: str | None = None
    failure: Failure | None = None


class CheckReport(WireModel):
    ok: bool
    roster: str
    executors: list[CheckResult]
    sandbox: str | None = None  # the confinement a run here gets (docs/sandbox.md)


def role_for(spec: ExecutorSpec, asked: str | None) -> str:
    if asked is not None:
        return asked
    return next((r for r in spec.roles if r in TEXT_ROLES), spec.roles[0] if spec.roles else "planner")


async def check_one(spec: ExecutorSpec, role: str, timeout_s: float) -> CheckResult:
    started = time.monotonic()
    reply: str | None = None
    failure: Failure | None = None
    with tempfile.TemporaryDirectory(prefix="flowd-roster-check-") as tmp:
        request = TurnRequest(
            role=role,
            prompt=PROMPT,
            cwd=Path(tmp),
            meta=FlowdMeta(role=role, run_id="roster-check", epic_id="roster-check"),
            turn_timeout_s=timeout_s,
            stall_timeout_s=timeout_s,
        )
        try:
            executor = make_executor(spec, clone=1)
        except (FlowdError, ValueError) as exc:
            failure = Failure(kind="error", message=str(exc))
        else:
            try:
                result = await executor.run_turn(request)
                reply = " ".join(result.text.split())[:120]
            except AgentError as exc:
                failure = Failure(kind=exc.kind, message=" ".join(exc.message.split())[:300])
            finally:
                await executor.close()
    return CheckResult(
        id=spec.id,
        kind=spec.kind,
        role=role,
        ok=failure is None,
        duration_ms=round((time.monotonic() - started) * 1000),
        reply=reply,
        failure=failure,
    )


async def check_all(specs: list[ExecutorSpec], role: str | None, timeout_s: float) -> list[CheckResult]:
    gate = asyncio.Semaphore(_AT_ONCE)

    async def one(spec: ExecutorSpec) -> CheckResult:
        async with gate:
            return await check_one(spec, role_for(spec, role), timeout_s)

    return list(await asyncio.gather(*(one(s) for s in specs)))


def render(report: CheckReport) -> str:
    width = max((len(r.id) for r in report.executors), default=0)
    lines = [f"roster: {report.roster}"]
    for r in report.executors:
        seconds = f"{r.duration_ms / 1000:.1f}s"
        if r.ok:
            said = f"  {r.reply!r}" if r.reply is not None else ""
            lines.append(f"  {r.id:<{width}}  ok      {seconds:>6}  {r.kind}, as {r.role}{said}")
        else:
            assert r.failure is not None
            lines.append(
                f"  {r.id:<{width}}  failed  {seconds:>6}  {r.kind}, as {r.role}: "
                f"{r.failure.kind}: {r.failure.message}"
            )
    failed = sum(1 for r in report.executors if not r.ok)
    total = len(report.executors)
    lines.append(
        f"{total - failed} of {total} executors answered" + ("" if not failed else f"; {failed} failed")
    )
    if report.sandbox is not None:
        lines.append(report.sandbox)
    return "\n".join(lines)


def _repo() -> Path:
    return toplevel(Path.cwd()) or Path.cwd()  # outside a checkout: the user's roster only


def _sandbox(repo: Path) -> str:
    """`sandbox: landlock ABI 7 (enforce)`: what a run in `repo` gets, by its `[sandbox] mode`."""
    try:
        mode = load_settings(repo).sandbox.mode
    except FlowdError:
        mode = "enforce"  # the run itself names a bad config.toml
    return status_line(mode)


def check_command(args: argparse.Namespace) -> int:
    role: str | None = getattr(args, "role", None)
    if role is not None and role not in ROLES:
        raise InputError(f"--role {role!r} is not a role; use one of {', '.join(ROLES)}")
    repo = _repo()
    hidden = flow_outside_sparse(repo)  # outside a checkout git lists nothing: None
    if hidden is not None:
        raise InputError(hidden)
    roster = load_roster(repo)  # a bad roster is the CLI's one sentence (as JSON with --json)
    specs = roster.for_role(role) if role is not None else list(roster.executors)
    if not specs:
        which = f" serves the {role} role" if role else " is configured"
        raise InputError(f"no executor{which} ({roster.described}); see docs/roster.md")
    timeout_s = float(getattr(args, "timeout", None) or DEFAULT_TIMEOUT_S)
    results = asyncio.run(check_all(specs, role, timeout_s))
    report = CheckReport(
        ok=all(r.ok for r in results), roster=roster.described, executors=results, sandbox=_sandbox(repo)
    )
    if getattr(args, "json", False):
        print(report.model_dump_json(by_alias=True, exclude_none=True))
    else:
        print(render(report))
    return EXIT_OK if report.ok else EXIT_FAILED
