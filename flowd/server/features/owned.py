"""`perimeter.ownedByRunningStory`: the user changes, in their checkout, a file that a running
story owns (as they type, on save, or on disk; docs/protocol.md)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.capabilities import get_capability

from flowd.base.errors import FlowdError
from flowd.server import diagnostics as diag
from flowd.server.features import RUNNING, Feature, checkout_path, open_uris

if TYPE_CHECKING:
    from flowd.events.model import Envelope
    from flowd.server.app import FlowServer
    from flowd.server.runs import Tracked

log = logging.getLogger(__name__)


class OwnershipWarnings(Feature):
    def __init__(self, server: FlowServer) -> None:
        super().__init__(server)
        self._typed: set[str] = set()  # uris edited in the editor since their last save

    async def started(self) -> None:
        """Ask the client for on-disk changes, when it can register for them."""
        ls = self.server
        if not get_capability(
            ls.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False
        ):
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
                ls.client_register_capability_async(lsp.RegistrationParams(registrations=[registration])), 5
            )
        except Exception as exc:
            log.info("client did not register file watching: %s", exc)

    # -- documents and files -------------------------------------------------------------------
    def opened(self, uri: str) -> None:
        self.server.spawn(self.recheck([uri]))

    def typed(self, uri: str) -> None:
        self._typed.add(uri)
        self._check([uri], changed_on_disk=set())

    def saved(self, uri: str) -> None:
        self._typed.discard(uri)
        self.server.spawn(self.recheck([uri]))

    closed = saved  # the buffer's edits are gone either way: only the disk counts now

    def changed_on_disk(self, uris: list[str]) -> None:
        self.server.spawn(self.recheck(uris))

    # -- runs ----------------------------------------------------------------------------------
    def run_event(self, run: Tracked, envelope: Envelope) -> None:
        from flowd.events.model import RunStarted, StoryStatusChanged

        if isinstance(envelope.event, StoryStatusChanged | RunStarted):
            self.server.spawn(self.recheck())

    def run_ended(self, run: Tracked) -> None:
        self.server.spawn(self.recheck())

    # -- the check -----------------------------------------------------------------------------
    def running_owner(self, rel: str) -> tuple[str, Tracked] | None:
        """The running story (and its run) that owns repository path `rel`, if any."""
        from flowd.plan import perimeter

        if self.server.runs is None:
            return None
        for run in self.server.runs.ordered():
            if run.ended:
                continue
            plan = self.server.plan_of(run)
            story = perimeter.owner_of_path(plan, rel) if plan else None
            lane = run.view.lanes.get(story) if story else None
            if story and lane is not None and lane.status in RUNNING:
                return story, run
        return None

    async def recheck(self, uris: list[str] | None = None) -> None:
        """Re-evaluate the warning for `uris` (default: every open or flagged file) against git."""
        ls = self.server
        if ls.repo is None:
            return
        if uris is None:
            uris = sorted({*open_uris(ls), *(k[1] for k in ls.diags.keys("owned"))})
        try:
            dirty = set(await asyncio.to_thread(ls.repo.status_paths, ls.repo.root))
        except FlowdError as exc:
            log.warning("%s", exc)
            return
        self._check(uris, changed_on_disk=dirty)

    def _check(self, uris: list[str], *, changed_on_disk: set[str]) -> None:
        for uri in uris:
            rel = checkout_path(self.server.repo, uri)
            found = self.running_owner(rel) if rel else None
            changed = uri in self._typed or (rel is not None and rel in changed_on_disk)
            if rel and found and changed:
                story, run = found
                self.server.diags.put(("owned", uri), uri, [diag.owned_by_running(rel, story, run.run_id)])
            else:
                self.server.diags.put(("owned", uri), uri, [])
