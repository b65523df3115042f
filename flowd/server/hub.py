"""What the daemon's sessions share: one repository, its runs followed and folded once, its story
worktrees watched once.

The hub owns the `RunManager` (one watch of `.flow/runs`, one fold per run) and is its hooks: each
run's life is fanned out to every session (`FlowServer`), whose features turn it into that
session's notifications and diagnostics. It owns the worktree watches too; a session sees them
through `SharedWatches` (docs/editors.md, "One daemon per repository").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowd.base.errors import FlowdError
from flowd.server.runs import RunHooks, RunManager, Tracked
from flowd.server.watch import Anchors, Key, Locate, Rescan, WorktreeWatches
from flowd.vcs.gitops import Repo

if TYPE_CHECKING:
    from cattrs import Converter

    from flowd.control.shapes import Places
    from flowd.events.model import Envelope

log = logging.getLogger(__name__)


class Hub(RunHooks):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo: Repo | None = None
        self.repo_problem: str | None = None
        self.runs: RunManager | None = None
        self.places: Places | None = None
        self.sessions: list[RunHooks] = []  # the sessions (FlowServer), each told every hook
        self.ready = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        # Each story worktree watched once, whatever the number of sessions watching it.
        self.watches = WorktreeWatches(lambda _key, message: self.watch_polled(message))
        self.subscribers: dict[Key, dict[int, Rescan]] = {}
        self._converter: Converter | None = None

    async def start(self) -> None:
        self.repo, self.repo_problem, self.places, self.runs = await open_runs(self.root, self, self._spawn)
        self.ready.set()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def converter(self) -> Converter:
        """The cattrs converter every session's protocol uses (pygls' `converter_factory`): made
        once, so the structuring code it generates per message type is generated once."""
        if self._converter is None:
            from pygls.protocol import default_converter

            self._converter = default_converter()  # type: ignore[no-untyped-call]
        return self._converter

    def stop(self) -> None:
        self.watches.stop_all()
        if self.runs is not None:
            self.runs.stop()
        for task in list(self._tasks):
            task.cancel()

    # -- sessions ------------------------------------------------------------------------------
    def live(self) -> list[Tracked]:
        """The runs going on whose snapshot a joining session is owed."""
        if self.runs is None:
            return []
        return [run for run in reversed(self.runs.ordered()) if run.live and not run.ended]

    def join(self, session: RunHooks) -> list[Tracked]:
        self.sessions.append(session)
        return self.live()

    def leave(self, session: RunHooks) -> None:
        if session in self.sessions:
            self.sessions.remove(session)

    def busy(self) -> bool:
        """Sessions, or a run going on: the daemon does not exit when idle."""
        return bool(self.sessions) or any(
            not run.ended for run in (self.runs.runs.values() if self.runs else [])
        )

    # -- run hooks, fanned out to every session ------------------------------------------------
    def attached(self, run: Tracked) -> None:
        run.live = True
        for session in list(self.sessions):
            _guard(session, "attached", lambda s: s.attached(run))

    def event(self, run: Tracked, envelope: Envelope) -> None:
        for session in list(self.sessions):
            _guard(session, "event", lambda s: s.event(run, envelope))

    def ended(self, run: Tracked) -> None:
        for session in list(self.sessions):
            _guard(session, "ended", lambda s: s.ended(run))

    def watch_polled(self, message: str) -> None:
        for session in list(self.sessions):
            _guard(session, "watch_polled", lambda s: s.watch_polled(message))


class SharedWatches:
    """A session's view of the hub's worktree watches, with `WorktreeWatches`' interface: the first
    session to watch a worktree starts its one watch, each change rescans it for every session
    watching, and the last one to stop ends it."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._me = id(self)

    def __contains__(self, key: Key) -> bool:
        return self._me in self._hub.subscribers.get(key, {})

    def __len__(self) -> int:
        return sum(1 for subs in self._hub.subscribers.values() if self._me in subs)

    def polling(self, key: Key) -> bool:
        return self._hub.watches.polling(key)

    def start(self, key: Key, locate: Locate, anchors: Anchors, rescan: Rescan) -> None:
        subs = self._hub.subscribers.setdefault(key, {})
        subs[self._me] = rescan
        if key not in self._hub.watches:
            self._hub.watches.start(key, locate, anchors, lambda: self._rescan_all(key))

    async def _rescan_all(self, key: Key) -> None:
        for rescan in list(self._hub.subscribers.get(key, {}).values()):
            try:
                await rescan()
            except Exception:  # one session's failure never keeps the others from their rescan
                log.exception("a session's rescan of %s failed; the others go on", key)

    def stop(self, key: Key) -> None:
        subs = self._hub.subscribers.get(key)
        if subs is None:
            return
        subs.pop(self._me, None)
        if not subs:
            del self._hub.subscribers[key]
            self._hub.watches.stop(key)

    def stop_run(self, run_id: str) -> None:
        for key in [k for k in self._hub.subscribers if k[0] == run_id]:
            self.stop(key)

    def stop_all(self) -> None:
        for key in list(self._hub.subscribers):
            self.stop(key)


def _guard(session: RunHooks, hook: str, call: Any) -> None:
    try:
        call(session)
    except Exception:  # one session's failure never keeps the others from hearing it
        log.exception("a session failed in %s; the others go on", hook)


async def open_runs(
    root: Path, hooks: RunHooks, spawn: Callable[[Coroutine[Any, Any, Any]], Any]
) -> tuple[Repo | None, str | None, Places | None, RunManager | None]:
    """The repository holding `root` (its main checkout, or why there is none), where its runs
    keep their things, and its runs followed (`hooks` told each one's life, the watch of
    `.flow/runs` handed to `spawn`): what the daemon's hub and an in-process server start with."""
    try:
        repo = await asyncio.to_thread(main_checkout, root)
    except FlowdError as exc:
        log.warning("%s", exc)
        return None, str(exc), None, None
    from flowd.cost.prices import pricer_at

    places = await asyncio.to_thread(places_of, repo)
    runs = RunManager(repo.root, hooks, await asyncio.to_thread(pricer_at, repo.root))
    await runs.start()
    spawn(runs.watch())
    return repo, None, places, runs


def places_of(repo: Repo) -> Places:
    """Where `repo`'s runs keep their things: the worktree root as `flowd run` resolves it from
    config.toml (a broken config: the default root, as the runner would refuse it anyway)."""
    from flowd.control.shapes import Places
    from flowd.store.config import load_settings
    from flowd.vcs.gitops import worktree_root

    try:
        configured = load_settings(repo.root).worktree_root
    except (FlowdError, OSError) as exc:  # a broken config must not stop the server
        log.warning("worktree root: %s; using the default", exc)
        configured = None
    return Places(repo.root, worktree_root(repo, configured))


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
