"""The language server's state and behaviour; `setup.py` binds LSP methods to it.

`FlowServer` joins the pieces: runs followed through their traces (`RunManager`), notification
pacing (`Pacer`), work-done progress per run, diagnostics merged per file (`DiagnosticStore`) and
watches of active story worktrees. Every method here runs on the server's event loop; blocking
work (git, reading traces, cancelling) goes to threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.capabilities import get_capability
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from flowd import __version__
from flowd.errors import FlowdError, InputError
from flowd.gitops import Repo
from flowd.server import diagnostics as diag
from flowd.server.notify import Note, Pacer, cost_note, notes_for, run_note, snapshot
from flowd.server.protocol import FlowProtocol
from flowd.server.runs import RunHooks, RunManager, Tracked
from flowd.server.watch import WorktreeWatches

if TYPE_CHECKING:
    # Modules built on pydantic (plans, events, views, params) load on first use, after
    # `initialize` has been answered (docs/performance.md).
    from flowd import runctl
    from flowd.events import Envelope, TaskOwnsViolation
    from flowd.plan.model import StoryPlan
    from flowd.view import Pricer, RunView

log = logging.getLogger(__name__)

REQUEST_FAILED = -32803  # LSP: the request was valid but could not be carried out
RUNNING = ("active",)  # lane statuses whose worktree an agent is writing in


def request_failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=REQUEST_FAILED)


@dataclass
class ProgressState:
    token: str
    begun: bool = False
    ended: bool = False
    last: str | None = None


class FlowServer(LanguageServer, RunHooks):
    def __init__(self) -> None:
        super().__init__("flowd", __version__, protocol_cls=FlowProtocol, max_workers=8)
        self.root: Path = Path.cwd()
        self.repo: Repo | None = None
        self.repo_problem: str | None = None
        self.runs: RunManager | None = None
        self.diags = diag.DiagnosticStore(self._publish)
        self.pacer = Pacer(self._send, self._call_later)
        self.worktrees = WorktreeWatches()
        self.progress_states: dict[str, ProgressState] = {}
        self.ready = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._typed: set[str] = set()  # uris edited in the editor since their last save
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- plumbing ------------------------------------------------------------------------------
    def report_server_error(self, error: Exception, source: Any) -> None:
        # Errors belong in the log, not in pop-ups; request errors already reach the client.
        log.error("%s", error)
        if isinstance(error, ValueError) and not isinstance(error, JsonRpcException):
            # The reader loop could not decode a body: JSON-RPC answers that with -32700.
            protocol = self.protocol
            if isinstance(protocol, FlowProtocol):
                protocol.parse_error(error)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("background task failed: %s", exc, exc_info=exc)

    def _call_later(self, delay: float, callback: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback)

    def _send(self, method: str, params: dict[str, Any]) -> None:
        self.protocol.notify(method, params)

    def _publish(self, uri: str, diagnostics: list[lsp.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    def _offer(self, notes: list[Note]) -> None:
        for note in notes:
            self.pacer.offer(note)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """After `initialized`: find the repository, re-attach to its runs, watch for more."""
        self._loop = asyncio.get_running_loop()
        self.root = self._workspace_root()
        try:
            self.repo = await asyncio.to_thread(main_checkout, self.root)
        except FlowdError as exc:
            self.repo_problem = str(exc)
            log.warning("%s", exc)
        if self.repo is not None:
            self.runs = RunManager(self.repo.root, self, await asyncio.to_thread(self._pricer))
            await self.runs.start()
            self.spawn(self.runs.watch())
        await self._register_file_watch()
        self.ready.set()

    def stop(self) -> None:
        """Stop following (runs themselves keep going: they are detached processes)."""
        with contextlib.suppress(Exception):
            self.pacer.flush()
        if self.runs is not None:
            self.runs.stop()
        self.worktrees.stop_all()
        for task in list(self._tasks):
            task.cancel()

    def _workspace_root(self) -> Path:
        try:
            workspace = self.workspace
        except RuntimeError:
            return Path.cwd()
        if workspace.root_path:
            return Path(workspace.root_path).resolve()
        for folder in workspace.folders.values():
            path = to_fs_path(folder.uri)
            if path:
                return Path(path).resolve()
        return Path.cwd()

    def _pricer(self) -> Pricer:
        from flowd.view import reported_cost

        try:
            from flowd.config import load_settings
            from flowd.cost.prices import pricer

            assert self.repo is not None
            return pricer(load_settings(self.repo.root))
        except Exception as exc:  # a broken config must not stop the server; costs fall back
            log.warning("prices: %s; showing only costs the agents report", exc)
            return reported_cost

    async def _register_file_watch(self) -> None:
        """Ask the client for on-disk changes (for `perimeter.ownedByRunningStory`)."""
        dynamic = get_capability(
            self.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False
        )
        if not dynamic:
            return
        options = lsp.DidChangeWatchedFilesRegistrationOptions(
            watchers=[lsp.FileSystemWatcher(glob_pattern="**/*")]
        )
        registration = lsp.Registration(
            id=f"flowd-files-{uuid.uuid4().hex[:8]}",
            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=options,
        )
        try:
            await asyncio.wait_for(
                self.client_register_capability_async(lsp.RegistrationParams(registrations=[registration])), 5
            )
        except Exception as exc:
            log.info("client did not register file watching: %s", exc)

    def need_repo(self) -> Repo:
        if self.repo is None:
            raise request_failed(self.repo_problem or f"{self.root} is not a git repository")
        return self.repo

    def need_runs(self) -> RunManager:
        self.need_repo()
        assert self.runs is not None
        return self.runs

    # -- plan arguments ------------------------------------------------------------------------
    def resolve_plan(self, method: str, raw: str) -> Path:
        """A plan argument: an absolute path, a file:// URI, or relative to the workspace root
        (the root the client opened, which may be a story worktree, not the repository)."""
        from flowd.server.params import invalid

        if raw.startswith("file:"):
            path_text = to_fs_path(raw)
            if not path_text:
                raise invalid(method, f"plan: {raw!r} is not a usable file URI")
            path = Path(path_text)
        elif "://" in raw:
            raise invalid(method, f"plan: {raw!r} is neither a path nor a file:// URI")
        else:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = self.root / path
        # Anywhere on disk, as `flowd run` accepts (docs/protocol.md): the server runs as the user,
        # and over TCP only a client holding the user's token gets this far.
        resolved = path.resolve()
        if resolved.is_dir():
            raise invalid(
                method, f"plan: {resolved} is a directory; give the plan file (*.epic.json or *.md)"
            )
        if not resolved.is_file():
            raise invalid(method, f"plan: no such plan file {resolved}; check the path (it may have moved)")
        return resolved

    def plan_violations(self, path: Path) -> list[Any]:
        """Violations of a plan file, from the editor's text when it is open there."""
        from flowd.plan.parse import check_plan_file, check_text, is_markdown

        uri = diag.file_uri(path)
        document = self.workspace.text_documents.get(uri)
        if document is not None:
            text = document.source
            return check_text(text, markdown=is_markdown(path, text))[1]
        return check_plan_file(path)

    def publish_plan(self, uri: str, violations: list[Any]) -> None:
        self.diags.put(("plan", uri), uri, diag.plan_diagnostics(violations))

    # -- documents -----------------------------------------------------------------------------
    def document_changed(self, uri: str, *, typed: bool) -> None:
        """didOpen/didChange: plan diagnostics, and the running-story warning while typing."""
        from flowd.plan.parse import check_text, is_markdown

        document = self.workspace.text_documents.get(uri)
        path_text = to_fs_path(uri)
        if document is not None and path_text is not None:
            path = Path(path_text)
            if self._is_plan(path, document.source):
                found = check_text(document.source, markdown=is_markdown(path, document.source))[1]
                self.publish_plan(uri, found)
        if typed:
            self._typed.add(uri)
            self._owned_check([uri], changed_on_disk=set())
        else:
            self.spawn(self.recheck_owned([uri]))

    def document_saved(self, uri: str) -> None:
        self._typed.discard(uri)
        self.spawn(self.recheck_owned([uri]))

    def document_closed(self, uri: str) -> None:
        self._typed.discard(uri)
        self.diags.put(("plan", uri), uri, [])
        self.spawn(self.recheck_owned([uri]))

    @staticmethod
    def _is_plan(path: Path, text: str) -> bool:
        from flowd.plan.parse import is_markdown

        name = path.name.lower()
        if name.endswith(".epic.json"):
            return True
        return is_markdown(path, text) and "```json" in text and "storyplan" in text

    # -- perimeter.ownedByRunningStory ---------------------------------------------------------
    def _relative(self, uri: str) -> str | None:
        path_text = to_fs_path(uri)
        if self.repo is None or not path_text:
            return None
        try:
            rel = Path(path_text).resolve().relative_to(self.repo.root).as_posix()
        except ValueError:
            return None
        return None if rel == "." or rel.startswith(".flow/") else rel

    def running_owner(self, rel: str) -> tuple[str, Tracked] | None:
        from flowd import perimeter

        if self.runs is None:
            return None
        for run in self.runs.ordered():
            if run.ended:
                continue
            plan = self.plan_of(run)
            story = perimeter.owner_of_path(plan, rel) if plan else None
            lane = run.view.lanes.get(story) if story else None
            if story and lane is not None and lane.status in RUNNING:
                return story, run
        return None

    async def recheck_owned(self, uris: list[str] | None = None) -> None:
        """Re-evaluate the warning for `uris` (default: every open or flagged file) against git."""
        if self.repo is None:
            return
        if uris is None:
            uris = sorted({*self.workspace.text_documents, *(k[1] for k in self.diags.keys("owned"))})
        try:
            dirty = set(await asyncio.to_thread(self.repo.status_paths, self.repo.root))
        except FlowdError as exc:
            log.warning("%s", exc)
            return
        self._owned_check(uris, changed_on_disk=dirty)

    def _owned_check(self, uris: list[str], *, changed_on_disk: set[str]) -> None:
        for uri in uris:
            rel = self._relative(uri)
            found = self.running_owner(rel) if rel else None
            changed = uri in self._typed or (rel is not None and rel in changed_on_disk)
            if rel and found and changed:
                story, run = found
                self.diags.put(("owned", uri), uri, [diag.owned_by_running(rel, story, run.run_id)])
            else:
                self.diags.put(("owned", uri), uri, [])

    def files_changed_on_disk(self, uris: list[str]) -> None:
        self.spawn(self.recheck_owned(uris))

    # -- run hooks (RunManager) ----------------------------------------------------------------
    def plan_of(self, run: Tracked) -> StoryPlan | None:
        from flowd.plan.parse import load_plan

        if run.plan is None and "planError" not in run.extra:
            try:
                run.plan = load_plan(Path(run.view.plan or run.record.plan))
            except (FlowdError, OSError) as exc:
                run.extra["planError"] = str(exc)
        return run.plan

    def attached(self, run: Tracked) -> None:
        run.extra["live"] = True
        self._offer(snapshot(run.view))
        self.spawn(self._progress_begin(run))
        self._sync_lanes(run)

    def event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events import (
            PerimeterViolation,
            RunEnded,
            RunStarted,
            StoryStatusChanged,
            TaskOwnsViolation,
        )

        event = envelope.event
        self._offer(notes_for(run.view, event))
        if isinstance(event, RunEnded):
            run.extra["endNotified"] = True
        if isinstance(event, StoryStatusChanged | RunStarted):
            self._progress_report(run)
            self._sync_lanes(run)
            self.spawn(self.recheck_owned())
        elif isinstance(event, TaskOwnsViolation):
            self._task_owns(run, event)
        elif isinstance(event, PerimeterViolation):
            self.spawn(self._rescan(run, event.lane))

    def ended(self, run: Tracked) -> None:
        if not run.extra.get("live"):
            return
        self.pacer.flush()
        if not run.extra.get("endNotified"):
            self._offer(notes_for_end(run.view))
        self.worktrees.stop_run(run.run_id)
        self.diags.clear(("perimeter", run.run_id))
        self.diags.clear(("taskOwns", run.run_id))
        self._progress_end(run)
        self.spawn(self.recheck_owned())
        self.pacer.forget(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] == run.run_id)

    # -- worktree watches and perimeter diagnostics --------------------------------------------
    def _sync_lanes(self, run: Tracked) -> None:
        """Watch every running lane's worktree (even before it exists); unwatch the others."""
        for lane in run.view.lanes.values():
            key = (run.run_id, lane.lane)
            if lane.status in RUNNING and not run.ended:
                if key not in self.worktrees and self.repo is not None:
                    self.worktrees.start(
                        key,
                        functools.partial(self._existing_worktree, run, lane.lane),
                        functools.partial(self._worktree_anchors, run, lane.lane),
                        functools.partial(self._rescan, run, lane.lane),
                    )
            elif key in self.worktrees:
                self.worktrees.stop(key)
                self.diags.clear(("perimeter", run.run_id, lane.lane))
                self.diags.clear(("taskOwns", run.run_id, lane.lane))

    def _worktree(self, run: Tracked, story: str) -> Path | None:
        from flowd.engine.state import EpicPaths, load_state

        try:
            state = load_state(EpicPaths(self.need_repo().root, run.epic_id), story)
        except (FlowdError, JsonRpcException, OSError, ValueError):
            return None
        return Path(state.worktree) if state is not None else None

    def _existing_worktree(self, run: Tracked, story: str) -> Path | None:
        worktree = self._worktree(run, story)
        return worktree if worktree is not None and worktree.is_dir() else None

    def _worktree_anchors(self, run: Tracked, story: str) -> list[Path]:
        """Where a story's worktree shows up: its state file (first attempt), then its directory."""
        from flowd.engine.state import EpicPaths

        if self.repo is None:
            return []
        anchors = [EpicPaths(self.repo.root, run.epic_id).state(story)]
        worktree = self._worktree(run, story)
        if worktree is not None:
            anchors.append(worktree)
        return anchors

    async def _rescan(self, run: Tracked, story: str) -> None:
        """What story `story` changed in its worktree, against its perimeter, as diagnostics."""
        from flowd import perimeter
        from flowd.engine.perimeter_now import perimeter_now

        key = ("perimeter", run.run_id, story)
        plan, repo, worktree = self.plan_of(run), self.repo, self._worktree(run, story)
        if plan is None or repo is None or run.ended:
            return
        if worktree is None or not worktree.is_dir():
            self.diags.replace(key, [])  # deleted by hand (or not there yet): nothing to show
            return
        try:
            strays = await asyncio.to_thread(perimeter_now, repo, plan, story, worktree)
        except FlowdError as exc:
            log.info("perimeter scan of %s: %s", story, exc)
            return
        lane = run.view.lanes.get(story)
        if run.ended or lane is None or lane.status not in RUNNING:
            return
        items: list[tuple[str, lsp.Diagnostic]] = []
        for found in strays:
            owner = perimeter.owner_of_path(plan, found.path)
            items += diag.perimeter_pair(
                kind=found.kind,
                story=story,
                run_id=run.run_id,
                path=found.path,
                worktree=worktree,
                checkout=repo.root,
                owner=owner,
            )
        self.diags.replace(key, items)

    def _task_owns(self, run: Tracked, event: TaskOwnsViolation) -> None:
        if self.repo is None:
            return
        worktree = self._worktree(run, event.lane)
        items: list[tuple[str, lsp.Diagnostic]] = []
        for path in event.paths:
            items += diag.task_owns_pair(
                story=event.lane,
                task=event.task,
                run_id=run.run_id,
                path=path,
                worktree=worktree,
                checkout=self.repo.root,
            )
        key = ("taskOwns", run.run_id, event.lane, event.task)
        self.diags.replace(key, items)

    def perimeter_violations(self) -> list[dict[str, Any]]:
        out = []
        for uri, _key, d in self.diags.items(("perimeter", "taskOwns")):
            data = d.data if isinstance(d.data, dict) else {}
            if data.get("mirror"):
                continue
            out.append(
                {
                    "uri": uri,
                    "story": data.get("story"),
                    "runId": data.get("runId"),
                    "code": d.code,
                    "message": d.message,
                }
            )
        return out

    async def _in_worktree(self, uri: str) -> str | None:
        """The repository path of a file in one of the repository's linked worktrees (a story's)."""
        path_text = to_fs_path(uri)
        if self.repo is None or not path_text:
            return None
        path = Path(path_text).resolve()
        try:
            worktrees = await asyncio.to_thread(self.repo.worktrees)
        except FlowdError:
            return None
        for info in worktrees[1:]:
            root = info.path.resolve()
            if path.is_relative_to(root) and path != root:
                rel = path.relative_to(root).as_posix()
                return None if rel.startswith(".flow/") else rel
        return None

    async def perimeter_of(self, uri: str) -> dict[str, Any]:
        """Who owns the file at `uri` (in the checkout, or at the same path in a story worktree)."""
        from flowd import perimeter

        rel = self._relative(uri) or await self._in_worktree(uri)
        if rel is None:
            path_text = to_fs_path(uri)
            if not path_text:
                raise JsonRpcInvalidParams("flow/perimeter: uri: not a file:// URI")
            raise JsonRpcInvalidParams(f"flow/perimeter: uri: {path_text} is not inside the repository")
        out: dict[str, Any] = {"path": rel, "sharedReadOnlyBy": []}
        for run in self.need_runs().ordered():
            plan = self.plan_of(run)
            if plan is None:
                continue
            story = perimeter.owner_of_path(plan, rel)
            shared = perimeter.shared_by(plan, rel)
            if story is None and not shared:
                continue
            if story is not None:
                lane = run.view.lanes.get(story)
                owner: dict[str, Any] = {"story": story, "runId": run.run_id}
                if lane is not None:
                    owner["status"] = lane.status
                out["owner"] = owner
            out["sharedReadOnlyBy"] = shared
            break
        return out

    # -- work-done progress --------------------------------------------------------------------
    def _progress_message(self, view: RunView) -> tuple[str, int]:
        finished = view.count("done") + view.count("failed") + view.count("skipped")
        total = view.total
        message = f"{view.count('done')}/{total} stories · {view.active_lanes} lanes"
        return message, (finished * 100 // total) if total else 0

    async def _progress_begin(self, run: Tracked) -> None:
        if not get_capability(self.client_capabilities, "window.work_done_progress", False):
            return
        if run.run_id in self.progress_states:
            return
        state = ProgressState(token=f"flowd-{run.run_id}-{uuid.uuid4().hex[:8]}")
        self.progress_states[run.run_id] = state
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(state.token), 10)
        except Exception as exc:
            log.info("no progress for run %s: %s", run.run_id, exc)
            del self.progress_states[run.run_id]
            return
        message, percentage = self._progress_message(run.view)
        self.work_done_progress.begin(
            state.token,
            lsp.WorkDoneProgressBegin(
                title=f"Epic {run.epic_id}", cancellable=True, message=message, percentage=percentage
            ),
        )
        state.begun, state.last = True, message
        if run.ended:
            self._progress_end(run)
        else:
            self._progress_report(run)

    def _progress_report(self, run: Tracked) -> None:
        state = self.progress_states.get(run.run_id)
        if state is None or not state.begun or state.ended:
            return
        message, percentage = self._progress_message(run.view)
        if message == state.last:
            return
        state.last = message
        self.work_done_progress.report(
            state.token, lsp.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    def _progress_end(self, run: Tracked) -> None:
        state = self.progress_states.get(run.run_id)
        if state is None or not state.begun or state.ended:
            return
        self._progress_report(run)
        state.ended = True
        view = run.view
        outcome = f"{view.status}: {view.count('done')} done, {view.count('failed')} failed, "
        outcome += f"{view.count('skipped')} skipped"
        self.work_done_progress.end(state.token, lsp.WorkDoneProgressEnd(message=outcome))

    def progress_cancelled(self, token: int | str) -> None:
        for run_id, state in self.progress_states.items():
            if state.token == token and not state.ended:
                log.info("progress cancelled by the client: cancelling run %s", run_id)
                self.spawn(self.cancel(run_id))

    # -- commands ------------------------------------------------------------------------------
    async def launch(self, method: str, plan_arg: str, options: runctl.LaunchOptions) -> dict[str, Any]:
        from flowd.plan.parse import load_plan
        from flowd.server.params import invalid

        runs = self.need_runs()
        path = self.resolve_plan(method, plan_arg)
        violations = await asyncio.to_thread(self.plan_violations, path)
        self.publish_plan(diag.file_uri(path), violations)
        if violations:
            shown = "; ".join(v.located() for v in violations[:5])
            more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
            raise invalid(method, f"plan {path} has {len(violations)} problem(s): {shown}{more}")
        plan = await asyncio.to_thread(load_plan, path)
        try:
            run = await runs.launch(path, plan.epic_id, options)
        except InputError as exc:
            raise request_failed(f"{method}: {exc}")
        return {"runId": run.run_id, "epicId": plan.epic_id, "epicBranch": plan.epic_branch}

    async def cancel(self, run_id: str) -> dict[str, Any]:
        runs = self.need_runs()
        try:
            outcome = await runs.cancel(run_id)
        except InputError as exc:
            raise JsonRpcInvalidParams(f"flow.cancelEpic: runId: {exc}")
        return {"runId": run_id, "outcome": outcome}

    async def resume_run(self, run_id: str, options: runctl.LaunchOptions) -> dict[str, Any]:
        from flowd.trace import load_run_record

        runs = self.need_runs()
        record = runs.find(run_id)
        plan = record.record.plan if record else None
        if plan is None:
            loaded = await asyncio.to_thread(load_run_record, runs.repo, run_id)
            if loaded is None:
                raise JsonRpcInvalidParams(f"flow.resumeEpic: runId: unknown run {run_id!r}")
            plan = loaded.plan
        if record is not None and not record.ended:
            raise request_failed(f"flow.resumeEpic: run {run_id} is still running")
        return await self.launch("flow.resumeEpic", plan, options)

    def validate(self, method: str, plan_arg: str) -> dict[str, Any]:
        path = self.resolve_plan(method, plan_arg)
        violations = self.plan_violations(path)
        self.publish_plan(diag.file_uri(path), violations)
        return {"violations": [v.located() for v in violations]}

    def status(self) -> dict[str, Any]:
        if self.runs is None:
            return {"runs": []}
        out = []
        for run in self.runs.ordered():
            wire = run.view.status_wire()
            wire["startedAt"] = wire.get("startedAt") or run.record.started_at
            out.append(wire)
        return {"runs": out}


def main_checkout(where: Path) -> Repo:
    """The repository's main checkout, also when `where` is in one of its linked worktrees.

    One server per repository (docs/editors.md): an editor opened on a story worktree is served
    by the checkout that owns the runs, so it sees the same runs, and nothing breaks when flowd
    removes that worktree after the merge.
    """
    repo = Repo.discover(where)
    if repo.git_dir == repo.common_dir:
        return repo
    try:
        main = repo.worktrees()[0].path
    except (FlowdError, IndexError):
        return repo
    if not (main / ".git").is_dir():
        return repo  # a bare repository's worktrees have no main checkout
    return Repo.discover(main)


def notes_for_end(view: RunView) -> list[Note]:
    """The closing notifications of a run that ended without a RunEnded event (killed)."""
    return [cost_note(view, transition=True), run_note(view)]
