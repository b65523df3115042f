"""The escape rule (engine/core/escape.py) by tables: what a path is, who is blamed, what is done."""

from __future__ import annotations

from typing import get_args

import pytest

from flowd.engine.core.escape import (
    WHAT_WORDS,
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
    what_of,
)
from flowd.events.model import EscapeWhat

PLACES = Places(
    checkout="/r/repo",
    common_dir="/r/repo/.git",
    home="/home/u",
    flow_dir="/r/repo/.flow",
    worktree_root="/r/repo.flowd",
)


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("/r/repo/.git/config", "gitConfig"),
        ("/r/repo/.git/info/exclude", "gitConfig"),
        ("/home/u/.gitconfig", "gitConfig"),
        ("/home/u/.config/git/config", "gitConfig"),
        ("/r/repo/.git/hooks/post-checkout", "gitHooks"),
        ("/r/repo/.git/refs/heads/main", "gitRef"),
        ("/r/repo/.git/packed-refs", "gitRef"),
        ("/r/repo/.git/worktrees/b/HEAD", "otherLane"),
        ("/r/repo.flowd/ep/b/INTRUDER.txt", "otherLane"),
        ("/r/repo.flowd/ep/_epic/x", "otherLane"),
        ("/r/repo/.flow/config.toml", "flowState"),
        ("/r/repo/.flow/runs/r1/trace.jsonl", "flowState"),
        ("/r/repo/README.md", "checkout"),
        ("/r/repo/.git/HEAD", "checkout"),
        ("/r/repository/x", "outside"),  # a sibling whose name starts alike is not the checkout
        ("/home/u/.bashrc", "home"),
        ("/home/u/.ssh/authorized_keys", "secret"),
        ("/etc/passwd", "outside"),
    ],
)
def test_what_a_path_is(path: str, what: str) -> None:
    assert what_of(path, PLACES) == what


A_TURN = Window("a", start=10.0, end=20.0, home="/r/repo.flowd/ep/a")
B_TURN = Window("b", start=15.0, end=30.0, home="/r/repo.flowd/ep/b")
B_RUNNING = Window("b", start=25.0, end=None, home="/r/repo.flowd/ep/b")
EPIC_GATE = Window("c", start=40.0, end=50.0, home="/r/repo.flowd/ep/_epic")


def change(at: float | None, *, what: str = "gitConfig", restorable: bool = True, **extra: str) -> Change:
    return Change(path="/p", what=what, at=at, restorable=restorable, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "the_change", "windows", "verdict"),
    [
        ("one lane ran then: blamed, put back", change(12.0), [A_TURN, B_TURN], Blame("a", "undone")),
        ("cannot be put back: reported", change(12.0, restorable=False), [A_TURN], Blame("a", "reported")),
        ("within the clock's slack of the end", change(20.01), [A_TURN], Blame("a", "undone")),
        ("past the slack: nobody ran", change(20.1), [A_TURN], Foreign()),
        ("before any window: the user's", change(5.0), [A_TURN, B_TURN], Foreign()),
        ("two lanes ran then: neither", change(17.0), [A_TURN, B_TURN], Unsure(("a", "b"), "undone")),
        ("a running window counts to now", change(99.0), [A_TURN, B_RUNNING], Blame("b", "undone")),
        (
            "never the victim: the owner's own window is left out",
            change(17.0, what="otherLane", owner="b", home="/r/repo.flowd/ep/b"),
            [A_TURN, B_TURN],
            Blame("a", "undone"),
        ),
        (
            "the owner alone ran: its own business",
            change(25.0, what="otherLane", owner="b", home="/r/repo.flowd/ep/b"),
            [A_TURN, B_TURN],
            Foreign(),
        ),
        (
            "an epic gate writes its own home",
            change(45.0, what="otherLane", home="/r/repo.flowd/ep/_epic"),
            [EPIC_GATE],
            Foreign(),
        ),
        ("no time known: any window since the check", change(None), [A_TURN], Blame("a", "undone")),
        ("no time known, nothing since the check", change(None), [Window("a", 1.0, 2.0)], Foreign()),
    ],
)
def test_who_is_blamed(name: str, the_change: Change, windows: list[Window], verdict: Verdict) -> None:
    assert judge(the_change, windows, since=8.0, now=100.0) == verdict, name


def test_the_sentence_names_the_story_the_path_and_what_was_done() -> None:
    text = sentence("a", Change("/r/repo/.git/hooks/post-checkout", "gitHooks", 1.0, True), "undone")
    assert text == (
        "story 'a' wrote past its lane: it changed /r/repo/.git/hooks/post-checkout "
        "(the repository's git hooks) while its command ran; flowd put it back "
        "(docs/sandbox-detection.md)"
    )
    more = sentence("a", Change("/x", "checkout", 1.0, False), "reported", more=2)
    assert "flowd could not put it back (2 more in the trace's LaneEscape events;" in more


@pytest.mark.parametrize(
    ("head", "secret"),
    [
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...", True),
        (b"junk\n-----BEGIN RSA PRIVATE KEY-----\n", True),
        (b"-----BEGIN PUBLIC KEY-----\n", False),
        (b"print('hello')\n", False),
    ],
)
def test_private_keys_are_secrets(head: bytes, secret: bool) -> None:
    assert holds_secret(head) is secret


@pytest.mark.parametrize(
    ("at", "runs", "ours"),
    [
        (10.0, [(9.0, 11.0)], True),
        (11.01, [(9.0, 11.0)], True),  # the coarse clock's slack
        (11.5, [(9.0, 11.0)], False),
        (None, [(9.0, 11.0)], False),  # no time: not known to be flowd's
        (10.0, [], False),
    ],
)
def test_flowds_own_git_runs(at: float | None, runs: list[tuple[float, float]], ours: bool) -> None:
    assert flowds_own(at, runs) is ours


def test_a_lanes_own_git_dir_under_enforce_is_its_own_doing_whoever_ran_beside() -> None:
    change = Change("/c/.git/worktrees/x/commondir", "gitDir", 5.0, True)
    windows = [Window("x", 0.0, 10.0), Window("v", 0.0, 10.0)]
    assert judge_own(change, "x", windows, sealed=True, since=0.0, now=11.0) == Blame("x", "undone")
    assert isinstance(judge_own(change, "x", windows, sealed=False, since=0.0, now=11.0), Unsure)


def test_every_kind_of_place_has_its_words() -> None:
    """A story's failure sentence names the kind of place in words, whatever kind a lane reached."""
    assert sorted(WHAT_WORDS) == sorted(get_args(EscapeWhat))
