"""Perimeter diagnostics: what a running story changed in its worktree outside its perimeter
(`perimeter.*`), and a parallel task outside its `Owns:` (`task.owns`); `flow/perimeter` answers
who owns a file and lists what is shown (docs/protocol.md)."""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.uris import to_fs_path

from flowd import protocol
from flowd.base.errors import FlowdError
from flowd.server import diagnostics as diag
from flowd.server.features import RUNNING, Feature, checkout_path

if TYPE_CHECKING:
    from flowd.events.model import Envelope, TaskOwnsViolation
    from flowd.server.runs import Tracked

log = logging.getLogger(__name__)
KINDS = ("perimeter", "taskOwns")  # the diagnostic store's key prefixes this feature owns


class PerimeterDiagnostics(Feature):
    # -- runs ----------------------------------------------------------------------------------
    def run_attached(self, run: Tracked) -> None:
        self._sync_lanes(run)

    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events.model import PerimeterViolation, RunStarted, StoryStatusChanged, TaskOwnsViolation

        event = envelope.event
        if isinstance(event, StoryStatusChanged | RunStarted):
            self._sync_lanes(run)
        elif isinstance(event, TaskOwnsViolation):
            self._task_owns(run, event)
        elif isinstance(event, PerimeterViolation):
            self.server.spawn(self._rescan(run, event.lane))

    def run_ended(self, run: Tracked) -> None:
        self.server.worktrees.stop_run(run.run_id)
        for kind in KINDS:
            self.server.diags.clear((kind, run.run_id))

    # -- worktree watches ----------------------------------------------------------------------
    def _sync_lanes(self, run: Tracked) -> None:
        """Watch every running lane's worktree (even before it exists); unwatch the others."""
        watches = self.server.worktrees
        for lane in run.view.lanes.values():
            key = (run.run_id, lane.lane)
            if lane.status in RUNNING and not run.ended:
                if key not in watches and self.server.repo is not None:
                    watches.start(
                        key,
                        functools.partial(self._existing_worktree, run, lane.lane),
                        functools.partial(self._worktree_anchors, run, lane.lane),
                        functools.partial(self._rescan, run, lane.lane),
                    )
            elif key in watches:
                watches.stop(key)
                for kind in KINDS:
                    self.server.diags.clear((kind, run.run_id, lane.lane))

    def _worktree(self, run: Tracked, story: str) -> Path | None:
        from flowd.engine.state import EpicPaths, load_state

        try:
            state = load_state(EpicPaths(self.server.need_repo().root, run.epic_id), story)
        except (FlowdError, JsonRpcException, OSError, ValueError):
            return None
        return Path(state.worktree) if state is not None else None

    def _existing_worktree(self, run: Tracked, story: str) -> Path | None:
        worktree = self._worktree(run, story)
        return worktree if worktree is not None and worktree.is_dir() else None

    def _worktree_anchors(self, run: Tracked, story: str) -> list[Path]:
        """Where a story's worktree shows up: its state file (first attempt), then its directory."""
        from flowd.engine.state import EpicPaths

        if self.server.repo is None:
            return []
        anchors = [EpicPaths(self.server.repo.root, run.epic_id).state(story)]
        worktree = self._worktree(run, story)
        if worktree is not None:
            anchors.append(worktree)
        return anchors

    # -- diagnostics ---------------------------------------------------------------------------
    async def _rescan(self, run: Tracked, story: str) -> None:
        """What story `story` changed in its worktree, against its perimeter, as diagnostics."""
        from flowd.engine.perimeter_now import perimeter_now
        from flowd.plan import perimeter

        key = ("perimeter", run.run_id, story)
        plan, repo, worktree = self.server.plan_of(run), self.server.repo, self._worktree(run, story)
        if plan is None or repo is None or run.ended:
            return
        if worktree is None or not worktree.is_dir():
            self.server.diags.replace(key, [])  # deleted by hand (or not there yet): nothing to show
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
            items += diag.perimeter_pair(
                kind=found.kind,
                story=story,
                run_id=run.run_id,
                path=found.path,
                worktree=worktree,
                checkout=repo.root,
                owner=perimeter.owner_of_path(plan, found.path),
            )
        self.server.diags.replace(key, items)

    def _task_owns(self, run: Tracked, event: TaskOwnsViolation) -> None:
        repo = self.server.repo
        if repo is None:
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
                checkout=repo.root,
            )
        self.server.diags.replace(("taskOwns", run.run_id, event.lane, event.task), items)

    # -- flow/perimeter ------------------------------------------------------------------------
    def violations(self) -> dict[str, Any]:
        """`flow/perimeter` without `uri`: every perimeter diagnostic shown (not the mirrors)."""
        out = []
        for uri, _key, d in self.server.diags.items(KINDS):
            data = d.data if isinstance(d.data, dict) else {}
            if data.get("mirror"):
                continue
            item = {"uri": uri, "story": data.get("story"), "runId": data.get("runId")}
            out.append({**item, "code": d.code, "message": d.message})
        return {"violations": out}

    async def _in_worktree(self, uri: str) -> str | None:
        """The repository path of a file in one of the repository's linked worktrees (a story's)."""
        path_text, repo = to_fs_path(uri), self.server.repo
        if repo is None or not path_text:
            return None
        path = Path(path_text).resolve()
        try:
            worktrees = await asyncio.to_thread(repo.worktrees)
        except FlowdError:
            return None
        for info in worktrees[1:]:
            root = info.path.resolve()
            if path.is_relative_to(root) and path != root:
                rel = path.relative_to(root).as_posix()
                return None if rel.startswith(".flow/") else rel
        return None

    async def _repository_path(self, uri: str) -> str:
        rel = checkout_path(self.server.repo, uri) or await self._in_worktree(uri)
        if rel is not None:
            return rel
        path_text = to_fs_path(uri)
        name = protocol.PERIMETER.name
        if not path_text:
            raise JsonRpcInvalidParams(f"{name}: uri: not a file:// URI")
        raise JsonRpcInvalidParams(f"{name}: uri: {path_text} is not inside the repository")

    async def owner_of(self, uri: str) -> dict[str, Any]:
        """Who owns the file at `uri` (in the checkout, or at the same path in a story worktree)."""
        from flowd.plan import perimeter
        from flowd.protocol.models import PerimeterOfFile, PerimeterOwner

        rel = await self._repository_path(uri)
        answer = PerimeterOfFile(path=rel, shared_read_only_by=[])
        for run in self.server.need_runs().ordered():
            plan = self.server.plan_of(run)
            if plan is None:
                continue
            story = perimeter.owner_of_path(plan, rel)
            shared = perimeter.shared_by(plan, rel)
            if story is None and not shared:
                continue
            if story is not None:
                lane = run.view.lanes.get(story)
                answer.owner = PerimeterOwner(
                    story=story, run_id=run.run_id, status=lane.status if lane else None
                )
            answer.shared_read_only_by = list(shared)
            break
        return answer.wire()
