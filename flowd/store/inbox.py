"""A live run's inbox: answers and review comments from the CLI and the editor reach the runner.

The runner is its own process (often detached from the editor that launched it) and the trace is
its only output, so requests travel the other way as files: one JSON request per file under
`.flow/runs/<runId>/inbox/`, written temp + rename so the runner never reads half of one. The
runner takes a request by renaming it into `inbox/taken/` (so a client that gives up can withdraw
an untaken request by renaming it away, and exactly one side wins), acts on it, records what it
did in the trace, and writes `inbox/<name>.reply.json`. docs/answers.md describes the flow.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError

from flowd.base.errors import InputError
from flowd.base.fsio import write_model_atomic
from flowd.base.timeutil import now
from flowd.base.wire import WireModel
from flowd.trace.log import is_active, load_run_record, run_dir

By = Literal["editor", "cli"]


class Answer(WireModel):
    """An answer to a pause: the run's (budget) when `story` is absent, else that story's."""

    kind: Literal["answer"] = "answer"
    story: str | None = None
    answer: str
    by: By


class Revision(WireModel):
    """A review comment on a line of a story's change, to become a revision task."""

    kind: Literal["revision"] = "revision"
    story: str
    path: str
    line: int
    text: str
    by: By


Request = Annotated[Answer | Revision, Field(discriminator="kind")]
_REQUEST: TypeAdapter[Answer | Revision] = TypeAdapter(Request)


class Reply(WireModel):
    """What the runner made of a request: `ok` false means nothing changed, `message` says why."""

    ok: bool
    message: str


def inbox_dir(repo: Path, run_id: str) -> Path:
    return run_dir(repo, run_id) / "inbox"


def _reply_path(base: Path, name: str) -> Path:
    return base / f"{name}.reply.json"


# -- the client side (CLI, language server) -------------------------------------------------------


def post(repo: Path, run_id: str, request: Answer | Revision, *, timeout_s: float = 15.0) -> Reply:
    """Hand `request` to the live run `run_id` and wait for its reply.

    Raises InputError when the run does not exist or is not running, or when it did not take the
    request in time (the request is then withdrawn, so nothing changes later behind the user's back).
    """
    record = load_run_record(repo, run_id)
    if record is None:
        raise InputError(f"No run {run_id} in {repo}; `flowd status` lists the runs.")
    if not is_active(record):
        raise InputError(f"Run {run_id} is not running; resume it with `flowd resume {run_id}` first.")
    base = inbox_dir(repo, run_id)
    # Time first so the runner takes requests in the order they were made.
    name = f"{now().strftime('%Y%m%dT%H%M%S%f')}-{secrets.token_hex(3)}"
    write_model_atomic(base / f"{name}.json", request)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = _read_reply(base, name)
        if reply is not None:
            return reply
        time.sleep(0.05)
    return _withdraw(base, name, run_id)


def _withdraw(base: Path, name: str, run_id: str) -> Reply:
    try:
        os.rename(base / f"{name}.json", base / f"{name}.withdrawn")
    except FileNotFoundError:
        # The runner took it meanwhile: its reply follows the action closely.
        for _ in range(100):
            reply = _read_reply(base, name)
            if reply is not None:
                return reply
            time.sleep(0.05)
    raise InputError(f"Run {run_id} did not take the request in time; nothing was changed, try again.")


def _read_reply(base: Path, name: str) -> Reply | None:
    path = _reply_path(base, name)
    try:
        reply = Reply.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError):
        return None  # still being renamed into place on an odd filesystem: read again
    path.unlink(missing_ok=True)
    return reply


async def post_async(repo: Path, run_id: str, request: Answer | Revision) -> Reply:
    """`post` off the event loop (the language server must keep answering meanwhile)."""
    return await asyncio.to_thread(post, repo, run_id, request)


# -- the runner side ------------------------------------------------------------------------------

Handler = Callable[[Answer | Revision], Awaitable[Reply]]


@dataclass
class InboxReader:
    """The runner's end: takes waiting requests in order, answers each."""

    repo: Path
    run_id: str

    @property
    def base(self) -> Path:
        return inbox_dir(self.repo, self.run_id)

    def take(self) -> list[tuple[str, Answer | Revision | Reply]]:
        """Every waiting request, oldest first, moved to `taken/`; an unreadable one comes back as
        the Reply that says so."""
        try:
            names = sorted(
                p.name for p in self.base.iterdir() if p.suffix == ".json" and ".reply" not in p.name
            )
        except FileNotFoundError:
            return []
        taken_dir = self.base / "taken"
        taken_dir.mkdir(exist_ok=True)
        out: list[tuple[str, Answer | Revision | Reply]] = []
        for file_name in names:
            if file_name.startswith("."):
                continue  # a temp file not yet renamed into place
            target = taken_dir / file_name
            try:
                os.rename(self.base / file_name, target)
            except FileNotFoundError:
                continue  # withdrawn by its client
            out.append((file_name.removesuffix(".json"), _parse(target)))
        return out

    def reply(self, name: str, reply: Reply) -> None:
        write_model_atomic(_reply_path(self.base, name), reply)

    async def serve(self, handle: Handler, interval_s: float = 0.1) -> None:
        """Answer requests until cancelled."""
        while True:
            for name, request in self.take():
                if isinstance(request, Reply):
                    self.reply(name, request)
                else:
                    self.reply(name, await handle(request))
            await asyncio.sleep(interval_s)


def _parse(path: Path) -> Answer | Revision | Reply:
    try:
        return _REQUEST.validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError) as exc:
        return Reply(
            ok=False,
            message=f"The request {path.name} could not be read ({type(exc).__name__}); send it again.",
        )
