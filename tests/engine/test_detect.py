"""The detector's shell (engine/detect.py) on a real repository and real files: what a step that
writes past its lane leaves behind, and what the user (no step running) or two lanes at once do."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from flowd.engine import detect
from flowd.engine.core.stops import StoryFailed
from flowd.engine.detect import Detector
from flowd.events.model import Event, Info, LaneEscape


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip


def _detector(tmp_path: Path, made: Path | None = None) -> tuple[Detector, list[Event], Path]:
    """A detector on the repository `made` (or a new one) with the epic and a story worktree."""
    repo = tmp_path / "repo"
    if made is None:
        repo.mkdir()
        _git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("# r\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", "init")
    _git(repo, "branch", "epic/ep")
    wt = tmp_path / "repo.flowd" / "ep" / "a"
    _git(repo, "worktree", "add", "-q", "-b", "story/ep/a", str(wt), "epic/ep")
    home = tmp_path / "home"
    home.mkdir()
    events: list[Event] = []
    detector = Detector(
        root=repo,
        common_dir=repo / ".git",
        epic_id="ep",
        epic_wt=tmp_path / "repo.flowd" / "ep" / "_epic",
        worktree_root=tmp_path / "repo.flowd",
        emit=events.append,
        home=home,
    )
    detector.start()
    return detector, events, wt


def test_a_step_that_writes_the_shared_config_fails_and_the_config_is_put_back(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    config = tmp_path / "repo" / ".git" / "config"
    original = config.read_bytes()

    async def step() -> None:
        async with detector.step("a", wt):
            _git(wt, "config", "core.hooksPath", "/tmp/evil")

    with pytest.raises(StoryFailed) as failed:
        asyncio.run(step())
    assert failed.value.reason.startswith(f"story 'a' wrote past its lane: it changed {config} ")
    assert config.read_bytes() == original
    assert events == [LaneEscape(lane="a", path=str(config), what="gitConfig", action="undone")]


def test_what_the_user_changes_while_no_step_runs_is_theirs(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    _git(repo, "config", "user.name", "me")
    _git(repo, "tag", "mine")
    (repo / "notes.txt").write_text("mine\n")
    earlier = time.time() - 5  # made a moment before the step, as a person would
    for path in (repo / ".git" / "config", repo / ".git" / "refs" / "tags" / "mine", repo / "notes.txt"):
        os.utime(path, (earlier, earlier))

    async def step() -> None:
        async with detector.step("a", wt):
            pass
        await detector.seen("a")  # the checkout's scan after the step

    asyncio.run(step())
    assert events == []
    assert "name = me" in (tmp_path / "repo" / ".git" / "config").read_text()
    assert _git(tmp_path / "repo", "tag").split() == ["mine"]


def test_a_write_into_the_users_checkout_fails_the_story_before_its_merge_and_is_left(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    failed: list[str] = []

    async def steps() -> None:
        try:
            async with detector.step("a", wt):
                (repo / "stray.txt").write_text("x\n")
            # The scan may end before the step does (raised there) or after: then by the merge.
            await detector.seen("a")
        except StoryFailed as stop:
            failed.append(stop.reason)
        async with detector.step("b", None):  # another lane's later step: already judged
            pass
        await detector.seen("b")

    asyncio.run(steps())
    assert len(failed) == 1 and failed[0].startswith(
        f"story 'a' wrote past its lane: it changed {repo / 'stray.txt'} (your checkout) while its command ran"
    )
    assert [(e.lane, e.path, e.what, e.action) for e in events if isinstance(e, LaneEscape)] == [
        ("a", str(repo / "stray.txt"), "checkout", "reported")
    ]
    assert (repo / "stray.txt").read_text() == "x\n"  # the user's checkout is never touched


def test_a_checkout_the_kernel_seals_is_never_scanned_and_what_changes_there_is_the_users(
    tmp_path: Path,
) -> None:
    """Under `enforce` with no `allowWrite` in the checkout, no lane process can write there: a
    file that changes in it while a step runs is the user's (here written by the test, as the user
    saving in their editor). No story is blamed, no merge waits for a scan, and none is made
    (on a big checkout, each is a `git status` of every file)."""
    detector, events, wt = _detector(tmp_path)
    detector.checkout_sealed = True
    repo = tmp_path / "repo"

    async def steps() -> None:
        async with detector.step("a", wt):
            (repo / "mine.txt").write_text("the user's\n")
        await detector.seen("a")
        assert detector._scanner is None  # no scan was asked for

    asyncio.run(steps())
    assert [e for e in events if isinstance(e, LaneEscape)] == []
    detector.check_shared()  # the run's last check: the checkout is not scanned either
    assert [e for e in events if isinstance(e, LaneEscape)] == []
    assert (repo / "mine.txt").read_text() == "the user's\n"


def test_two_lanes_running_at_once_are_neither_blamed_and_nothing_is_undone(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    other = tmp_path / "repo.flowd" / "ep" / "b"
    _git(tmp_path / "repo", "worktree", "add", "-q", "-b", "story/ep/b", str(other), "epic/ep")
    hook = tmp_path / "repo" / ".git" / "hooks" / "post-checkout"
    a_in, b_in, written = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def a() -> None:
        async with detector.step("a", wt):
            a_in.set()
            await b_in.wait()  # both lanes are in a step when the hook is written
            hook.write_text("#!/bin/sh\n")
            written.set()

    async def b() -> None:
        await a_in.wait()
        async with detector.step("b", other):
            b_in.set()
            await written.wait()

    async def both() -> None:
        await asyncio.gather(a(), b())

    asyncio.run(both())
    assert not any(isinstance(e, LaneEscape) for e in events)
    notes = [e.message for e in events if isinstance(e, Info)]
    assert len(notes) == 1 and notes[0].startswith(f"{hook} (the repository's git hooks) changed while")
    assert "stories 'a', 'b'" in notes[0] and hook.exists()


def test_a_write_into_a_quiet_lanes_worktree_is_blamed_on_the_writer(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    victim = tmp_path / "repo.flowd" / "ep" / "b"
    _git(tmp_path / "repo", "worktree", "add", "-q", "-b", "story/ep/b", str(victim), "epic/ep")

    async def steps() -> None:
        async with detector.step("b", victim):
            (victim / "own.txt").write_text("b's own work\n")
        async with detector.step("a", wt):
            (victim / "INTRUDER.txt").write_text("x\n")
        async with detector.step("b", victim):  # b's next step: it finds the intruder first
            pass

    asyncio.run(steps())
    with pytest.raises(StoryFailed, match=r"^story 'a' wrote past its lane: it changed .*INTRUDER\.txt"):
        detector.raise_pending("a")  # at a's next step
    assert [(e.lane, e.path, e.what, e.action) for e in events if isinstance(e, LaneEscape)] == [
        ("a", str(victim / "INTRUDER.txt"), "otherLane", "undone")
    ]
    assert not (victim / "INTRUDER.txt").exists() and (victim / "own.txt").exists()


def test_another_epic_named_alike_is_watched_and_this_epics_story_branches_are_not(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    _git(repo, "branch", "epic/ep2")
    detector.start()
    evil = _git(repo, "commit-tree", "-m", "evil", "HEAD^{tree}").strip()

    async def step() -> None:
        async with detector.step("a", wt):
            _git(wt, "update-ref", "refs/heads/epic/ep2", evil)
            _git(wt, "commit", "-q", "--allow-empty", "-m", "the lane's own commit")  # its own branch

    with pytest.raises(StoryFailed):
        asyncio.run(step())
    assert [(e.path, e.action) for e in events if isinstance(e, LaneEscape)] == [
        ("refs/heads/epic/ep2", "undone")
    ]
    assert _git(repo, "rev-parse", "epic/ep2").strip() == _git(repo, "rev-parse", "main").strip()


def test_what_allow_write_names_is_not_an_escape(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    detector.allow_write = ("~/.bashrc", "~/build-cache")
    bashrc = detector.home / ".bashrc"
    bashrc.write_text("# mine\n")
    detector.start()

    async def step() -> None:
        async with detector.step("a", wt):
            bashrc.write_text("# the build's\n")
            (detector.home / "build-cache").mkdir()

    asyncio.run(step())
    assert events == [] and bashrc.read_text() == "# the build's\n"


def test_a_ref_lock_file_is_not_a_ref(tmp_path: Path) -> None:
    """git's `<ref>.lock` while flowd moves the epic branch (a merge-train landing) is no ref a
    lane could have written; it was once blamed on the lane whose step was running."""
    import subprocess

    from flowd.engine.fingerprint import read_refs

    repo = tmp_path / "r"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    head = (repo / ".git" / "refs" / "heads" / "main").read_text(encoding="utf-8")
    (repo / ".git" / "refs" / "heads" / "main.lock").write_text(head, encoding="utf-8")
    assert sorted(read_refs(repo / ".git")) == ["refs/heads/main"]


def test_one_ref_read_alone_is_what_every_ref_read_together_gives(tmp_path: Path) -> None:
    """`read_ref` (one ref, read after every step for each story branch) agrees with `read_refs`
    on loose refs, packed refs, a loose ref over a packed one, a symbolic ref and a missing one."""
    from flowd.engine.fingerprint import read_ref, read_refs

    repo = tmp_path / "r"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", *args)
    _git(repo, "branch", "story/ep/a")
    _git(repo, "branch", "story/ep/b")
    _git(repo, "pack-refs", "--all")  # both packed, then one moved: loose over packed
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "j")
    _git(repo, "update-ref", "refs/heads/story/ep/b", "HEAD")
    _git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    common = repo / ".git"
    every = read_refs(common)
    for name in ("refs/heads/main", "refs/heads/story/ep/a", "refs/heads/story/ep/b", "refs/heads/alias",
                 "refs/heads/story/ep", "refs/heads/none"):  # fmt: skip
        assert read_ref(common, name) == every.get(name), name
    assert every["refs/heads/story/ep/a"].where == common / "packed-refs"
    assert every["refs/heads/story/ep/b"].where == common / "refs/heads/story/ep/b"


@pytest.mark.parametrize(
    "how", ["a loose ref over a packed one", "packed-refs rewritten", "a packed ref deleted"]
)
def test_your_packed_refs_moved_by_a_lane_are_put_back(tmp_path: Path, how: str) -> None:
    """A repository with many packed refs (release tags): detection compares only the loose refs
    while packed-refs stays the same file, and every ref when it changed. A lane that moves a
    packed tag by writing a loose file over it, or deletes one and moves another by rewriting
    packed-refs, is caught either way, the refs put back and the lane blamed. A deleted packed ref
    changed when packed-refs did, not when its folder last did (it was taken for a change from
    outside the step, and not put back, when the folder was older or newer than the step)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD").strip()
    made = "".join(f"create refs/tags/v{i} {head}\n" for i in range(2000))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=repo, input=made, text=True, check=True)
    _git(repo, "pack-refs", "--all")
    detector, events, wt = _detector(tmp_path, made=repo)
    evil = _git(repo, "commit-tree", "-m", "evil", "HEAD^{tree}").strip()
    packed = repo / ".git" / "packed-refs"
    before = packed.read_bytes()
    long_ago = time.time_ns() - 100 * 1_000_000_000
    os.utime(repo / ".git" / "refs" / "tags", ns=(long_ago, long_ago))

    async def step() -> None:
        async with detector.step("a", wt):
            if how == "a loose ref over a packed one":
                (repo / ".git" / "refs" / "tags" / "v1234").write_text(evil + "\n")
            elif how == "a packed ref deleted":
                packed.write_text(before.decode().replace(f"{head} refs/tags/v77\n", ""))
            else:
                text = before.decode().replace(f"{head} refs/tags/v1234\n", f"{evil} refs/tags/v1234\n")
                packed.write_text(text.replace(f"{head} refs/tags/v77\n", ""))

    with pytest.raises(StoryFailed):
        asyncio.run(step())
    moved = {(e.lane, e.path, e.action) for e in events if isinstance(e, LaneEscape)}
    if how != "a packed ref deleted":
        assert ("a", "refs/tags/v1234", "undone") in moved
    if how != "a loose ref over a packed one":
        assert ("a", "refs/tags/v77", "undone") in moved
    assert _git(repo, "rev-parse", "v1234", "v77").split() == [head, head]


def test_a_sibling_story_branch_written_past_git_is_put_back_and_the_writer_blamed(tmp_path: Path) -> None:
    """Lanes of one epic share the directory their branches live in (docs/sandbox.md): a ref
    file written directly (no reflog entry; git's own update is refused its reflog) is caught."""
    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    wt_b = tmp_path / "repo.flowd" / "ep" / "b"
    _git(repo, "worktree", "add", "-q", "-b", "story/ep/b", str(wt_b), "epic/ep")
    detector.start()
    b_head = _git(repo, "rev-parse", "story/ep/b").strip()
    evil = _git(repo, "commit-tree", "-m", "evil", "HEAD^{tree}").strip()

    async def step() -> None:
        async with detector.step("a", wt):
            (repo / ".git" / "refs" / "heads" / "story" / "ep" / "b").write_text(evil + "\n")
            _git(wt, "commit", "-q", "--allow-empty", "-m", "the lane's own commit")  # its own branch

    with pytest.raises(StoryFailed) as failed:
        asyncio.run(step())
    assert "refs/heads/story/ep/b" in failed.value.reason
    assert [(e.lane, e.path, e.action) for e in events if isinstance(e, LaneEscape)] == [
        ("a", "refs/heads/story/ep/b", "undone")
    ]
    assert _git(repo, "rev-parse", "story/ep/b").strip() == b_head


def test_story_branches_flowd_and_their_own_lanes_move_are_not_escapes(tmp_path: Path) -> None:
    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    wt_b = tmp_path / "repo.flowd" / "ep" / "b"
    _git(repo, "worktree", "add", "-q", "-b", "story/ep/b", str(wt_b), "epic/ep")
    detector.start()

    async def steps() -> None:
        async with detector.step("a", wt):
            _git(wt_b, "commit", "-q", "--allow-empty", "-m", "flowd's commit in b (logged)")
        async with detector.step("b", wt_b):  # b writes its own ref file: its own business
            head = _git(wt_b, "commit-tree", "-m", "b's own", "HEAD^{tree}").strip()
            (repo / ".git" / "refs" / "heads" / "story" / "ep" / "b").write_text(head + "\n")

    asyncio.run(steps())
    assert [e for e in events if isinstance(e, LaneEscape)] == []


def test_a_scan_of_the_checkout_nobody_waits_for_rests_and_a_merge_waiting_ends_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that ends right after a scan of the user's checkout does not start another at once
    (on a big checkout, back-to-back scans keep a core busy); a merge waiting for one does."""
    monkeypatch.setattr(detect, "CHECKOUT_REST", 1e6)
    detector, events, wt = _detector(tmp_path)

    async def steps() -> None:
        async with detector.step("a", wt):
            pass
        await detector.seen("a")  # one scan, begun after a's step ended
        async with detector.step("b", None):
            pass
        ended = detector._last_end["b"]
        for _ in range(50):  # the scanner's turns come and go: it rests
            await asyncio.sleep(0.01)
        assert detector._checkout_began <= ended
        await asyncio.wait_for(detector.seen("b"), 60)  # the merge's wait ends the rest
        assert detector._checkout_began > ended

    asyncio.run(steps())
    assert events == []


def test_what_flowds_own_git_writes_in_a_lanes_worktree_is_blamed_on_no_lane(tmp_path: Path) -> None:
    """flowd's own git writes a quiet lane's files (a catch-up merge, a rollback) while another
    lane's turn runs: that lane is not blamed (docs/sandbox-detection.md "Who is blamed")."""
    from flowd.vcs.gitcli import run_git
    from flowd.vcs.gitops import Repo

    detector, events, wt = _detector(tmp_path)
    repo = tmp_path / "repo"
    Repo(repo)  # the repository flowd works on: its git there is pinned, and noted
    victim = tmp_path / "repo.flowd" / "ep" / "b"
    _git(repo, "worktree", "add", "-q", "-b", "story/ep/b", str(victim), "epic/ep")
    _git(repo, "checkout", "-q", "-b", "newer")
    (repo / "README.md").write_text("# newer\n")
    _git(repo, "commit", "-qam", "newer")
    _git(repo, "checkout", "-q", "main")
    detector.start()  # the branch made above is the user's, from before the run

    async def steps() -> None:
        async with detector.step("b", victim):
            (victim / "own.txt").write_text("b's own work\n")
        async with detector.step("a", wt):
            run_git(victim, ["checkout", "newer", "--", "README.md"], "flowd's own write")
        async with detector.step("b", victim):
            pass

    asyncio.run(steps())
    detector.raise_pending("a")  # nothing: flowd wrote it
    assert [e for e in events if isinstance(e, LaneEscape)] == []
    assert (victim / "README.md").read_text() == "# newer\n"


def test_the_secret_look_never_waits_on_a_fifo_swapped_in_for_a_file(tmp_path: Path) -> None:
    """Between git's status and flowd's look a file can become a FIFO: the look opens it without
    blocking, sees no regular file, and goes on (it used to wait for a writer, forever)."""
    detector, events, wt = _detector(tmp_path)
    (wt / "notes.txt").write_text("plain\n")
    entries = detect.status(wt)
    assert entries is not None and "notes.txt" in entries
    (wt / "notes.txt").unlink()
    os.mkfifo(wt / "notes.txt")
    look = threading.Thread(target=detector._check_secrets, args=("a", wt, entries), daemon=True)
    look.start()
    look.join(10)
    stuck = look.is_alive()
    if stuck:  # let it go before failing: a writer opens the FIFO
        os.close(os.open(wt / "notes.txt", os.O_WRONLY | os.O_NONBLOCK))
        look.join(10)
    assert not stuck and events == []
