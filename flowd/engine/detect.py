"""Detection, the second line behind confinement (docs/sandbox-detection.md).

Every agent turn, task gate and setup command of a lane runs inside `Detector.step`: a window
opens, and when the step ends the lane's stray processes are killed and the shared places are
compared with their fingerprints (the repository's git config, hooks and info, its refs, flowd's
settings and state, the home directory's startup and git files). The user's checkout is scanned
beside the steps instead (a `git status` of a big checkout takes a second under load): a step does
not wait for it, a story's merge does (`Detector.seen`). A lane's own
worktree is fingerprinted when its step ends and compared when its next step starts, so a change
made there meanwhile is another lane's. The rule (what counts, who is blamed, what is done) is
`engine/core/escape.py`'s; this module fingerprints and reports, `engine/putback.py` puts back and
`engine/lane_procs.py` finds the stray processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from flowd.base import layout
from flowd.base.fsio import open_regular, written_by_us
from flowd.engine import epic_worktree
from flowd.engine.core.escape import (
    Blame,
    Change,
    Foreign,
    Places,
    Unsure,
    Verdict,
    Window,
    flowds_own,
    holds_secret,
    judge,
    judge_own,
    sentence,
    suspects,
    unsure_note,
    what_of,
)
from flowd.engine.core.stops import StoryFailed
from flowd.engine.fingerprint import (
    MISSING,
    Entry,
    FilePrint,
    RefPrint,
    RefStore,
    changed_at,
    files_under,
    head_file,
    print_file,
    read_ref,
    read_ref_store,
    ref_changed_at,
    same,
    status,
    unlogged_move,
)
from flowd.engine.lane_procs import kill_lane_processes
from flowd.engine.putback import (
    descends,
    put_file_back,
    put_ref_back,
    put_worktree_path_back,
    remove_path,
    safely,
)
from flowd.engine.state import EpicPaths
from flowd.events.model import EscapeAction, EscapeWhat, Event, Info, LaneEscape
from flowd.programs.state_dirs import every_state_root
from flowd.sandbox.confine import current
from flowd.vcs.admin import AdminProblem, check_admin
from flowd.vcs.admin import check_candidate as check_candidate_slot
from flowd.vcs.gitcli import own_git_runs, private_git_dir
from flowd.vcs.packed_refs import Packed

log = logging.getLogger(__name__)

# Startup and git files of the home directory: a write there runs later with the user's rights.
HOME_FILES = (
    ".gitconfig", ".config/git/config", ".bashrc", ".bash_profile", ".bash_login", ".profile",
    ".zshrc", ".zprofile", ".zshenv", ".config/fish/config.fish", ".ssh/authorized_keys",
    ".ssh/config", ".config/flowd/roster.toml",
)  # fmt: skip
# New entries of the home directory the agent programs make for their own state (docs/sandbox.md).
AGENT_STATE = (
    ".claude", ".claude.json", ".codex", ".gemini", ".npm", ".cache", ".config", ".local",
    ".bun", ".cursor", ".qwen", ".opencode", ".node-gyp", ".pki", ".dotnet", ".cargo", ".rustup",
    # and the caches and histories common tools make on first use
    ".yarn", ".yarnrc", ".pnpm-store", ".m2", ".gradle", "go", ".deno", ".nvm", ".pyenv", ".conda",
    ".ipython", ".jupyter", ".wget-hsts", ".lesshst", ".python_history", ".node_repl_history",
    ".bash_history", ".sudo_as_admin_successful", ".android", ".vscode-server", ".dbus",
)  # fmt: skip
FLOW_FILES = ("config.toml", "roster.toml", "roster-state.json")
# Between two scans of the user's checkout that no merge waits for, this many times the last
# scan's length passes (`Detector._rest`): a third of a core at most on a big checkout.
CHECKOUT_REST = 2.0
SECRET_HEAD = 8192  # how much of a changed file is read for a private key


@dataclass
class _Snap:
    """A lane worktree as its last step left it."""

    entries: dict[str, Entry]
    taken: float
    admin: Path | None  # the worktree's private git dir
    head: FilePrint  # its HEAD file (another lane may point it elsewhere)


@dataclass
class Detector:
    """One run's detection. `enabled` False (`[sandbox] mode = "off"`) makes every call a no-op."""

    root: Path
    common_dir: Path
    epic_id: str
    epic_wt: Path
    worktree_root: Path
    emit: Callable[[Event], object]
    home: Path = field(default_factory=Path.home)
    enabled: bool = True
    allow_write: tuple[str, ...] = ()
    trace_guard: Callable[[], str | None] | None = None
    # The kernel refuses every lane process a write into the user's checkout (`enforce`, no
    # `allowWrite` there: `Confinement.seals`): a change there can only be the user's, so it is
    # never scanned, no story is blamed for it and no merge waits for a scan (docs/sandbox-detection.md
    # "The user's checkout"; on a 25,000-file checkout each scan is a `git status` of 0.1-0.4 s).
    checkout_sealed: bool = False
    # Refs flowd itself makes and drops mid-run (a Ray node's fetched story branches).
    own_refs: tuple[str, ...] = ()
    windows: list[Window] = field(default_factory=list)
    pending: dict[str, list[tuple[Change, EscapeAction]]] = field(default_factory=dict)
    _files: dict[str, FilePrint] = field(default_factory=dict)
    _refs: dict[str, RefPrint] = field(default_factory=dict)
    _basis: Packed | None = None  # the packed-refs `_refs` was last compared with in full
    _loose_seen: set[str] = field(default_factory=set)  # the loose refs at the last look
    _checkout: dict[str, Entry] = field(default_factory=dict)
    _checkout_head: bytes = b""
    _home_names: set[str] = field(default_factory=set)
    _snaps: dict[str, _Snap] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _checked: float = 0.0  # when the last shared check began (it has ended: both hold `_lock`)
    _checkout_began: float = 0.0  # when the last scan of the user's checkout taken in began
    _checkout_wanted: float = 0.0  # the latest step end a scan of the checkout must follow
    _last_end: dict[str, float] = field(default_factory=dict)  # each lane's latest step end
    _scanner: asyncio.Task[None] | None = None
    _scanned: asyncio.Event = field(default_factory=asyncio.Event)  # set, and replaced, per scan
    _awaited: asyncio.Event = field(default_factory=asyncio.Event)  # set while a merge waits for a scan
    _waiting: int = 0  # how many merges wait for a scan (`seen`)
    _rest_until: float = 0.0  # monotonic: no scan nobody waits for begins before (`_rest`)
    _epic_checked: float = 0.0  # when the last epic worktree check began (under the merge lock)
    # The run's merge lock: the epic worktree is checked only while no merge is writing it.
    merge_lock: asyncio.Lock | None = None
    epic_head: RefPrint | None = None  # the epic branch as flowd's last merge left it

    @property
    def places(self) -> Places:
        return Places(
            checkout=str(self.root),
            common_dir=str(self.common_dir),
            home=str(self.home),
            flow_dir=str(self.root / ".flow"),
            worktree_root=str(self.worktree_root),
        )

    # -- the steps -------------------------------------------------------------------------------
    def start(self) -> None:
        """Take the first fingerprints (after flowd's own set-up writes: info/exclude, the epic)."""
        if not self.enabled:
            return
        with self._lock:
            self._files = {key: print_file(Path(key)) for key in self._file_places()}
            self._refs = self._watched_refs()
            self._checkout = {} if self.checkout_sealed else status(self.root) or {}
            self._checkout_head = head_file(self.common_dir)
            self._home_names = self._home_listing()
            self._checked = self._checkout_began = time.time()
        self.epic_settled()

    def epic_settled(self) -> None:
        """flowd moved the epic branch (a merge, a rollback): that is where it belongs now."""
        self.epic_head = read_ref(self.common_dir, f"refs/heads/epic/{self.epic_id}")

    @contextlib.asynccontextmanager
    async def step(
        self, lane: str | None, home: Path | None, *, own_home: bool = True
    ) -> AsyncIterator[None]:
        """Run one step of `lane` (a turn, a gate, a setup command) with `home` its worktree
        (`own_home` False: a worktree that is not the lane's own, the epic's for its gates)."""
        if not self.enabled or lane is None:
            yield
            return
        self.raise_pending(lane)
        if home is not None and own_home:
            await asyncio.to_thread(self.check_git_dir, home, lane, self._last_end.get(lane, 0.0))
            await asyncio.to_thread(self.check_lane_worktree, lane, home)
        self.raise_pending(lane)
        window = Window(lane=lane, start=time.time(), home=str(home) if home else None)
        self.windows.append(window)  # the window list changes in the event loop's thread only
        done = False
        try:
            yield
            done = True
        finally:
            alone = not any(w.lane == lane and w.end is None and w is not window for w in self.windows)
            if alone:  # no other step of the lane (a parallel task) is running: strays are strays
                await asyncio.shield(asyncio.to_thread(self._kill_strays, lane, window.start))
            ended = self._close(window)
            if home is not None:
                await asyncio.shield(asyncio.to_thread(self.check_git_dir, home, lane, window.start))
            await asyncio.shield(asyncio.to_thread(self._after_step, lane, home if own_home else None, ended))
            self._want_checkout(ended)
            await asyncio.shield(self._check_epic_if_quiet(ended))
        if done:
            self.raise_pending(lane)

    def _close(self, window: Window) -> float:
        index = next(i for i, w in enumerate(self.windows) if w is window)
        ended = time.time()
        self.windows[index] = Window(window.lane, window.start, ended, window.home)
        self._last_end[window.lane] = ended
        self._forget_old_windows()
        return ended

    def _after_step(self, lane: str, home: Path | None, ended: float) -> None:
        self.check_shared(after=ended, checkout=False)
        if home is not None:
            entries = self.snapshot(home)
            self._check_secrets(lane, home, entries or {})

    async def _check_epic_if_quiet(self, ended: float) -> None:
        lock = self.merge_lock
        if lock is None or lock.locked():
            return  # a merge (or its epic gates) is writing the epic worktree right now
        async with lock:
            if self._epic_checked > ended:
                return  # a check that began after this step ended has run: it saw this step's writes
            await asyncio.to_thread(self.check_epic_worktree)

    def raise_pending(self, lane: str) -> None:
        found = self.pending.pop(lane, None)
        if found:
            change, action = found[0]
            raise StoryFailed(sentence(lane, change, action, more=len(found) - 1))

    def _forget_old_windows(self) -> None:
        # Windows older than every snapshot and check can no longer be asked about.
        taken = (s.taken for s in self._snaps.values())
        horizon = min([self._checked, self._checkout_began, *taken]) - 60.0
        self.windows = [w for w in self.windows if w.end is None or w.end >= horizon]

    # -- verdicts -------------------------------------------------------------------------------
    def _settle(self, change: Change, since: float, restore: Callable[[], bool]) -> Verdict:
        """Judge a change and carry out the verdict; returns it (Foreign: take it as it is now)."""
        return self._carry_out(change, judge(change, self.windows, since=since, now=time.time()), restore)

    def _carry_out(self, change: Change, verdict: Verdict, restore: Callable[[], bool]) -> Verdict:
        if isinstance(verdict, Foreign):
            return verdict
        if isinstance(verdict, Unsure):
            # Not put back: it may be the user's change made while several lanes ran.
            self.emit(Info(message=unsure_note(change, Unsure(verdict.lanes, "reported"))))
            return Unsure(verdict.lanes, "reported")
        action = verdict.action
        if action == "undone" and not safely(restore):
            action = "reported"
        self.emit(LaneEscape(lane=verdict.lane, path=change.path, what=change.what, action=action))
        self.pending.setdefault(verdict.lane, []).append((change, action))
        return Blame(verdict.lane, action)

    # -- shared places --------------------------------------------------------------------------
    def check_shared(self, after: float | None = None, *, checkout: bool = True) -> None:
        """Compare every shared place with its fingerprint; put back, blame, report. `after`: a step
        ended then, and a check begun since has already seen what it wrote (with several lanes,
        one check serves every step that ended while another ran). `checkout` False: the user's
        checkout is left to its own scan (`_want_checkout`)."""
        if not self.enabled:
            return
        with self._lock:
            if after is not None and self._checked > after:
                return
            since, self._checked = self._checked, time.time()
            self._check_trace(since)  # first: what the checks below report is appended to it
            self._check_files(since)
            refs = read_ref_store(self.common_dir)  # one read of the ref store for both checks
            self._check_refs(since, refs)
            self._check_story_refs(since, refs)
            self._check_home(since)
        if checkout:
            self.check_checkout()

    # -- the user's checkout, scanned beside the steps ----------------------------------------
    def _want_checkout(self, ended: float) -> None:
        """A step ended at `ended`: a scan of the user's checkout that begins after it sees what it
        wrote there. One scan runs at a time, in a task of its own, and serves every step that
        ended before it began; no step waits for it (`seen` does)."""
        if self.checkout_sealed:
            return
        self._checkout_wanted = max(self._checkout_wanted, ended)
        if self._scanner is None or self._scanner.done():
            self._scanner = asyncio.get_running_loop().create_task(self._scan_checkout())

    async def _scan_checkout(self) -> None:
        while self._checkout_wanted >= self._checkout_began:
            await self._rest()
            began, clock = time.time(), time.monotonic()
            try:
                await asyncio.shield(asyncio.to_thread(self.check_checkout))
            except Exception as exc:  # a scan that failed is a scan missed, never a stuck merge
                log.warning("could not scan the checkout %s for escapes: %s", self.root, exc)
                self._checkout_began = max(self._checkout_began, began)
            finally:
                done, self._scanned = self._scanned, asyncio.Event()
                done.set()
                now = time.monotonic()
                self._rest_until = now + CHECKOUT_REST * (now - clock)

    async def _rest(self) -> None:
        """Before a scan nobody waits for, rest `CHECKOUT_REST` times as long as the last one
        took: on a big checkout with several lanes a step ends during every scan, and scanning back
        to back would keep a core on `git status` while the lanes want it (docs/performance.md "A
        big monorepo"). A merge waiting for a scan (`seen`) ends the rest at once."""
        left = self._rest_until - time.monotonic()
        if left > 0 and not self._awaited.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._awaited.wait(), left)

    async def seen(self, lane: str) -> None:
        """Wait for a scan of the user's checkout begun after the lane's last step ended, then fail
        the story if anything blamed it: a story never merges past an escape not yet seen."""
        if not self.enabled:
            return
        ended = None if self.checkout_sealed else self._last_end.get(lane)
        while ended is not None and self._checkout_began <= ended:
            scanned = self._scanned
            self._waiting += 1
            self._awaited.set()
            self._want_checkout(ended)
            try:
                await scanned.wait()
            finally:
                self._waiting -= 1
                if not self._waiting:
                    self._awaited.clear()
        self.raise_pending(lane)

    def check_checkout(self) -> None:
        """Scan the user's checkout (its `git status` outside the lock, so the shared check of a
        step that ends meanwhile does not wait for it) and judge what changed."""
        if self.checkout_sealed:
            return
        began = time.time()
        entries, head = status(self.root), head_file(self.common_dir)
        with self._lock:
            if began <= self._checkout_began:
                return  # a scan begun later was taken in already
            since, self._checkout_began = self._checkout_began, began
            if entries is not None:
                self._check_checkout(since, head, entries)

    def _file_places(self) -> list[str]:
        common, flow = self.common_dir, self.root / ".flow"
        paths = [common / "config", *files_under(common / "hooks"), *files_under(common / "info")]
        paths += [self.home / name for name in HOME_FILES]
        paths += [flow / name for name in FLOW_FILES]
        return [str(p) for p in paths if not self._allowed(p)]

    def _allowed(self, path: Path) -> bool:
        """Inside a path `[sandbox] allowWrite` names (`~/…`, absolute, or repository-relative)."""
        for entry in self.allow_write:
            root = self.home / entry[2:] if entry == "~" or entry.startswith("~/") else Path(entry)
            root = root if root.is_absolute() else self.root / root
            if path == root or root in path.parents:
                return True
        return False

    def _check_files(self, since: float) -> None:
        current = set(self._file_places())
        for key in sorted(current | set(self._files)):
            before = self._files.get(key, MISSING)
            now = print_file(Path(key), before)
            if same(before, now) or (now.data is not None and written_by_us(Path(key), now.data)):
                self._files[key] = now  # unchanged, or flowd's own write (roster-state.json)
                continue
            change = Change(
                path=key,
                what=what_of(key, self.places),
                at=changed_at(Path(key), now),
                restorable=before.data is not None or not before.exists,
            )
            verdict = self._settle(change, since, partial(put_file_back, Path(key), before))
            if isinstance(verdict, Foreign) or verdict.action != "undone":
                self._files[key] = print_file(Path(key))
        for key in [k for k in self._files if k not in current and not self._files[k].exists]:
            del self._files[key]

    def _watched_refs(self) -> dict[str, RefPrint]:
        refs = read_ref_store(self.common_dir)
        self._basis, self._loose_seen = refs.packed, set(refs.loose)
        watched = refs.as_dict()
        # Only names under these can be unwatched (`_watched`): looked up, not every ref tested.
        for prefix in ("refs/heads/epic/", "refs/heads/story/", *self.own_refs):
            for name in refs.starting(prefix):
                if not self._watched(name):
                    watched.pop(name, None)
        return watched

    def _watched(self, name: str) -> bool:
        stories, epic = f"refs/heads/story/{self.epic_id}/", f"refs/heads/epic/{self.epic_id}"
        return (
            name != epic and not name.startswith((stories, *self.own_refs)) and not self._other_run_owns(name)
        )

    def _other_run_owns(self, name: str) -> bool:
        """A branch of another epic whose run is live: that run moves it."""
        for prefix in ("refs/heads/epic/", "refs/heads/story/"):
            if name.startswith(prefix):
                epic = name[len(prefix) :].split("/")[0]
                return EpicPaths(self.root, epic).lock.exists()
        return False

    def _check_refs(self, since: float, refs: RefStore) -> None:
        checked_out = head_file(self.common_dir).decode(errors="replace").removeprefix("ref:").strip()
        for name in self._may_have_moved(refs):
            if not self._watched(name):
                continue
            before, after = self._refs.get(name), refs.get(name)
            if (before and before.sha) == (after and after.sha):
                continue
            change = Change(
                path=name,
                what="gitRef",
                # A removed ref changed where it was (a packed one: packed-refs), not its folder.
                at=ref_changed_at(self.common_dir, name, after or before),
                restorable=name != checked_out,  # the user's own branch: maybe their commit
            )
            verdict = self._settle(change, since, partial(put_ref_back, self.common_dir, name, before))
            if isinstance(verdict, Foreign) or verdict.action != "undone":
                if after is None:
                    self._refs.pop(name, None)
                else:
                    self._refs[name] = after
        self._basis, self._loose_seen = refs.packed, set(refs.loose)

    def _may_have_moved(self, refs: RefStore) -> list[str]:
        """The refs to compare with the last look, sorted: with packed-refs the same file as then,
        those loose then or now (a packed ref changes only with the file: git rewrites it whole);
        else every one."""
        if refs.packed is self._basis:
            return sorted(self._loose_seen | refs.loose.keys())
        return sorted(refs.packed_prints.keys() | refs.loose.keys() | self._refs.keys())

    def _check_story_refs(self, since: float, refs: RefStore) -> None:
        """This epic's story branches share one directory every lane may write (docs/sandbox.md):
        a story's branch moved with no reflog entry was written past git, by another lane."""
        prefix = f"refs/heads/story/{self.epic_id}/"
        for name in refs.starting(prefix):
            logged = unlogged_move(self.common_dir, name)
            if logged is None:
                continue
            now = read_ref(self.common_dir, name)
            change = Change(path=name, what="gitRef", at=ref_changed_at(self.common_dir, name, now),
                            restorable=True)  # fmt: skip
            if name.removeprefix(prefix) in suspects(change, self.windows, since=since, now=time.time()):
                continue  # its own lane was running then: it may move its own branch
            before = RefPrint(logged, self.common_dir / name)
            self._settle(change, since, partial(put_ref_back, self.common_dir, name, before))

    def _check_checkout(self, since: float, head: bytes, entries: dict[str, Entry]) -> None:
        """The user's checkout: reported, never put back (the user may be editing it)."""
        if head != self._checkout_head:
            change = Change(
                str(self.common_dir / "HEAD"), "checkout", changed_at_path(self.common_dir / "HEAD"), False
            )
            self._settle(change, since, lambda: False)
        inside = _rel_inside(self.worktree_root, self.root)
        for rel, entry in sorted(entries.items()):
            if self._checkout.get(rel) == entry or (inside and (rel + "/").startswith(inside)):
                continue
            path = self.root / rel
            at = entry.mtime_ns / 1e9 if entry.mtime_ns is not None else changed_at(path, MISSING)
            self._settle(Change(str(path), "checkout", at, False), since, lambda: False)
        self._checkout, self._checkout_head = entries, head

    def _home_listing(self) -> set[str]:
        try:
            return set(os.listdir(self.home))
        except OSError:
            return set()

    def _agent_state(self, path: Path) -> bool:
        """A home entry an agent program's own state lives in (flowd/programs/state_dirs.py): the
        table's places and what its variables pin (`CODEX_HOME`, `FLOWD_SCRIPT_STATE`, …)."""
        return any(root == path or path in root.parents for root in every_state_root(self.home))

    def _check_home(self, since: float) -> None:
        names = self._home_listing()
        for name in sorted(names - self._home_names):
            path = self.home / name
            if name in AGENT_STATE or name.startswith(".claude.json") or self._allowed(path):
                continue
            if self._agent_state(path):
                continue
            path = self.home / name
            change = Change(str(path), what_of(str(path), self.places), changed_at_path(path), False)
            self._settle(change, since, lambda: False)
        self._home_names = names

    def _check_trace(self, since: float) -> None:
        if self.trace_guard is None:
            return
        action = self.trace_guard()
        if action is None:
            return
        path = str(self.root / ".flow" / "runs")
        # No time of its own (flowd appends all the time): the lanes that ran since the last check.
        lanes = sorted({w.lane for w in self.windows if w.end is None or w.end >= since})
        done: EscapeAction = "undone" if action == "undone" else "reported"
        change = Change(path + "/…/trace.jsonl", "flowState", None, done == "undone")
        if len(lanes) == 1:
            self.emit(LaneEscape(lane=lanes[0], path=change.path, what="flowState", action=done))
            self.pending.setdefault(lanes[0], []).append((change, done))

    # -- lane worktrees ------------------------------------------------------------------------
    def check_git_dir(self, wt: Path, lane: str, since: float) -> None:
        """The git admin files of `wt`, where `lane`'s processes ran (flowd/vcs/admin.py): put
        back at once, whoever wrote them (flowd's own git must never follow them), then blamed:
        on `lane` when confinement enforces (no other lane can write there), else by when."""
        confined = current()
        sealed = confined is not None and confined.enforcing
        with self._lock:
            for problem in check_admin(self.common_dir, wt, self._lane_head(wt)):
                change = Change(str(problem.path), "gitDir", problem.at, problem.put_back)
                now = time.time()
                verdict = judge_own(change, lane, self.windows, sealed=sealed, since=since, now=now)
                self._carry_out(change, verdict, partial(bool, problem.put_back))  # put back already

    def check_candidate(
        self, wt: Path, lane: str | None, at: str, elsewhere: Sequence[AdminProblem] = ()
    ) -> int:
        """The git admin files and object store of the merge-train candidate `wt` (docs/merging.md
        "Candidates"), after its epic gates ran and before flowd's own git reuses it: put back as
        a lane's are (flowd/vcs/admin.py `check_candidate`: a candidate's HEAD is detached at a
        commit the repository holds, its quarantine thrown away), each one a `gitDir` (or
        `gitObjects`) escape of `lane`, the story whose code the gates ran (None: a candidate of
        several stories, or no one story can be named: no innocent one is blamed, an `Info` says
        what was put back). `at`: the commit a `HEAD` is put back to. `elsewhere`: what a cluster
        node found in its own slot after the gates ran there (docs/scale-out.md), reported the
        same. Put back even when detection is off: flowd's own checkout and merge there must not
        follow what a gate planted. The number of admin files found changed (objects thrown away
        that no ref named are said in an `Info`, not counted)."""
        with self._lock:
            found = [*check_candidate_slot(self.common_dir, wt, at), *elsewhere]
            for problem in found if self.enabled else []:
                self._report_candidate(problem, lane)
        return sum(1 for problem in found if problem.what is not None)

    def _report_candidate(self, problem: AdminProblem, lane: str | None) -> None:
        action: EscapeAction = "undone" if problem.put_back else "reported"
        if lane is not None and not problem.earlier and problem.what in ("gitDir", "gitObjects"):
            what: EscapeWhat = "gitObjects" if problem.what == "gitObjects" else "gitDir"
            self.emit(LaneEscape(lane=lane, path=str(problem.path), what=what, action=action))
            return
        said = "put back" if problem.put_back else "could not be put back"
        if problem.what is None:
            message = f"the epic gates of a merge candidate wrote into {problem.path}: {problem.why}"
        else:
            message = f"the epic gates of a merge candidate changed {problem.path} ({problem.why}); {said}"
        self.emit(Info(lane=lane, message=message))

    def _lane_head(self, wt: Path) -> str | None:
        """What the HEAD of a lane worktree of this epic says when it names a branch: its own."""
        if wt.parent != self.worktree_root / self.epic_id:
            return None  # a merge-train candidate, a spare: detached
        if wt.name == layout.EPIC_LANE:
            return f"ref: refs/heads/{layout.epic_branch(self.epic_id)}"
        story, task, index = wt.name.partition(layout.TASK_WORKTREE)
        if task and index.isdigit():
            return f"ref: refs/heads/{layout.task_branch(self.epic_id, story, int(index))}"
        return f"ref: refs/heads/{layout.story_branch(self.epic_id, wt.name)}"

    def snapshot(self, wt: Path, entries: dict[str, Entry] | None = None) -> dict[str, Entry] | None:
        """Fingerprint a lane worktree as its step leaves it (`entries`: its status, if just read)."""
        entries = status(wt) if entries is None else entries
        if entries is not None:
            admin = admin_dir(wt)
            head = print_file(admin / "HEAD") if admin is not None else MISSING
            self._snaps[str(wt)] = _Snap(entries, time.time(), admin, head)
        return entries

    def forget(self, wt: Path) -> None:
        """flowd removed `wt` and makes it again (a Ray lane placed again): nothing in it since
        its last step is another lane's doing."""
        self._snaps.pop(str(wt), None)

    def _check_secrets(self, lane: str, wt: Path, entries: dict[str, Entry]) -> None:
        """A private key copied into the lane's own files would be committed on its branch."""
        found = False
        for rel, entry in sorted(entries.items()):
            if entry.size is None or entry.code[1] == "D":
                continue
            try:
                # A link followed (one to your key is a key), a FIFO never waited on.
                handle = open_regular(wt / rel, follow=True)
                if handle is None:
                    continue
                with handle:
                    head = handle.read(SECRET_HEAD)
            except OSError:
                continue
            if not holds_secret(head):
                continue
            action: EscapeAction = (
                "undone" if safely(partial(put_worktree_path_back, wt, rel, entry)) else "reported"
            )
            change = Change(str(wt / rel), "secret", None, action == "undone")
            self.emit(LaneEscape(lane=lane, path=change.path, what="secret", action=action))
            self.pending.setdefault(lane, []).append((change, action))
            found = True
        if found:
            self.snapshot(wt)

    def check_lane_worktree(self, lane: str | None, wt: Path) -> None:
        """Changes in a worktree since its lane's last step ended: not that lane's doing."""
        snap = self._snaps.get(str(wt))
        if snap is None:
            self.snapshot(wt)
            return
        if not any(w.lane != lane and (w.end is None or w.end >= snap.taken) for w in list(self.windows)):
            return  # no other lane ran since: nothing here can be another lane's (a single lane: free)
        entries = status(wt)
        if entries is None:
            return
        ours = own_git_runs(wt)
        with self._lock:
            self._check_admin_head(lane, wt, snap)
            for rel, entry in sorted(entries.items()):
                if snap.entries.get(rel) == entry:
                    continue
                path = wt / rel
                at = entry.mtime_ns / 1e9 if entry.mtime_ns is not None else changed_at(path, MISSING)
                if flowds_own(at, ours):
                    continue  # flowd's own git wrote it (a catch-up merge's conflict, a rollback)
                change = Change(str(path), "otherLane", at, rel not in snap.entries, owner=lane, home=str(wt))
                verdict = self._settle(change, snap.taken, partial(put_worktree_path_back, wt, rel, entry))
                if not isinstance(verdict, Foreign) and verdict.action == "undone":
                    entries = None  # put back: read it again
        self.snapshot(wt, entries)

    def _check_admin_head(self, lane: str | None, wt: Path, snap: _Snap) -> None:
        if snap.admin is None or admin_dir(wt) != snap.admin:
            return  # flowd made the worktree again
        path = snap.admin / "HEAD"
        now = print_file(path, snap.head)
        if snap.head.exists and now.exists and not same(snap.head, now):
            change = Change(str(path), "otherLane", changed_at(path, now), True, owner=lane, home=str(wt))
            self._settle(change, snap.taken, partial(put_file_back, path, snap.head))

    def check_epic_worktree(self) -> list[str]:
        """The epic worktree and branch are flowd's alone (checked under the merge lock): whatever
        changed there another lane did. Returns the paths left (the user's, or not put back)."""
        if not self.enabled:
            return []
        self._epic_checked = time.time()
        if epic_worktree.placeholder(self.epic_wt):
            with self._lock:
                self._check_epic_ref()
                return self._check_placeholder()
        entries = status(self.epic_wt) or {}
        left = []
        with self._lock:
            self._check_epic_ref()
            for rel, entry in sorted(entries.items()):
                path = self.epic_wt / rel
                at = entry.mtime_ns / 1e9 if entry.mtime_ns is not None else changed_at(path, MISSING)
                change = Change(str(path), "otherLane", at, True, home=str(self.epic_wt))
                verdict = self._settle(change, 0.0, partial(put_worktree_path_back, self.epic_wt, rel, entry))
                if isinstance(verdict, Foreign) or verdict.action != "undone":
                    left.append(rel)
        return left

    def _check_placeholder(self) -> list[str]:
        """The epic worktree not checked out yet (engine/epic_worktree.py) holds its `.git` file
        alone: anything else in it another lane wrote, and it goes (nothing there is kept)."""
        left = []
        for name in sorted(_listing(self.epic_wt) - {".git"}):
            path = self.epic_wt / name
            change = Change(str(path), "otherLane", changed_at_path(path), True, home=str(self.epic_wt))
            verdict = self._settle(change, 0.0, partial(remove_path, path))
            if isinstance(verdict, Foreign) or verdict.action != "undone":
                left.append(name)
        return left

    def _check_epic_ref(self) -> None:
        name = f"refs/heads/epic/{self.epic_id}"
        now, before = read_ref(self.common_dir, name), self.epic_head
        if before is None or now is None or now.sha == before.sha:
            return
        if descends(self.common_dir, now.sha, before.sha):
            self.epic_head = now  # commits on top: the user may work on the epic branch
            return
        change = Change(name, "gitRef", ref_changed_at(self.common_dir, name, now), True)
        verdict = self._settle(change, 0.0, partial(put_ref_back, self.common_dir, name, before))
        if isinstance(verdict, Foreign) or verdict.action != "undone":
            self.epic_head = now

    def lane_worktrees(self) -> list[Path]:
        return [Path(key) for key in self._snaps]

    def sweep(self, worktrees: list[Path]) -> None:
        """At the end of the run: every place once more, nothing running any more."""
        if not self.enabled:
            return
        self.check_shared()
        for wt in worktrees:
            if str(wt) in self._snaps and wt.exists():
                self.check_lane_worktree(None, wt)
        self.check_epic_worktree()

    # -- stray processes ------------------------------------------------------------------------
    def _kill_strays(self, lane: str, since: float) -> None:
        strays = kill_lane_processes(lane, since, (self.worktree_root / self.epic_id, self.root))
        if strays:
            listed = ", ".join(f"{pid} ({cmd[:60]})" for pid, cmd in strays[:5])
            self.emit(
                Info(
                    lane=lane,
                    message=f"story '{lane}' left {len(strays)} process(es) running after its command "
                    f"ended; flowd killed them: {listed}",
                )
            )


def _listing(folder: Path) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def admin_dir(wt: Path) -> Path | None:
    """A linked worktree's private git dir, as flowd pins it (never where its `.git` file
    points: flowd/vcs/gitcli.py)."""
    return private_git_dir(wt)


def _rel_inside(path: Path, root: Path) -> str | None:
    """`path` relative to `root` with a trailing slash, when it lies inside it."""
    try:
        return str(path.resolve().relative_to(root.resolve())) + "/"
    except ValueError:
        return None


def changed_at_path(path: Path) -> float | None:
    return changed_at(path, print_file(path))
