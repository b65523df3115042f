"""Review comments as tables: which a story takes, and which a resumed run still owes; no git."""

from __future__ import annotations

import pytest

from flowd.engine.core.review_comments import Refusal, Requested, RevisionFacts, admit, marker, owed


def facts(**changes: object) -> RevisionFacts:
    base: dict[str, object] = {
        "known": True,
        "status": "active",
        "merged": False,
        "merging": False,
        "safe_path": True,
        "lines": 10,
        "line": 3,
    }
    base.update(changes)
    return RevisionFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (facts(), None),
        (facts(status="planned"), None),  # not started: takes it after its task plan
        (facts(status="waiting"), None),  # waiting on a dependency, or cancelled and resumable
        (facts(status="ready"), None),  # waiting for approval to merge: a revision comes first
        (facts(line=10), None),  # the last line
        (facts(lines=0, line=1), None),  # an empty file still has a line 1
        (facts(known=False), Refusal.UNKNOWN_STORY),
        (facts(known=False, safe_path=False), Refusal.UNKNOWN_STORY),  # the story first
        (facts(status="done"), Refusal.MERGED),
        (facts(merged=True, status="planned"), Refusal.MERGED),  # merged by an earlier run
        (facts(merged=True, lines=None), Refusal.MERGED),  # its worktree is gone: still "merged"
        (facts(merging=True), Refusal.MERGING),
        (facts(status="failed"), Refusal.FAILED),
        (facts(status="skipped"), Refusal.SKIPPED),
        (facts(safe_path=False, lines=None), Refusal.BAD_PATH),
        (facts(lines=None), Refusal.NO_FILE),
        (facts(line=11), Refusal.BAD_LINE),
        (facts(line=0), Refusal.BAD_LINE),
        (facts(lines=0, line=2), Refusal.BAD_LINE),
    ],
)
def test_admit(given: RevisionFacts, expected: Refusal | None) -> None:
    assert admit(given) is expected


def req(rid: str, lane: str = "a") -> Requested:
    return Requested(id=rid, lane=lane, path="a.py", line=1, text="rename it")


@pytest.mark.parametrize(
    ("requested", "checkpoints", "merged", "expected"),
    [
        ([], {}, set(), []),
        # recorded, never made a task (killed between the record and the checkpoint): owed
        ([req("r1")], {}, set(), ["r1"]),
        ([req("r1")], {"a": "# Plan: a\n\n## [ ] t\n"}, set(), ["r1"]),
        # made a task (done or not): the checkpoint resumes it, nothing is owed
        ([req("r1")], {"a": f"## [ ] Review comment 1\n{marker('r1')}\n"}, set(), []),
        ([req("r1")], {"a": f"## [x] Review comment 1\n{marker('r1')}\n"}, set(), []),
        # only the ones not yet taken, in the order they were made
        (
            [req("r1"), req("r2"), req("r3")],
            {"a": f"{marker('r2')}\n"},
            set(),
            ["r1", "r3"],
        ),
        # a merged story owes nothing; another story's checkpoint says nothing about this one
        ([req("r1"), req("r2", lane="b")], {"b": marker("r1")}, {"b"}, ["r1"]),
    ],
)
def test_owed(
    requested: list[Requested], checkpoints: dict[str, str], merged: set[str], expected: list[str]
) -> None:
    assert [r.id for r in owed(requested, checkpoints, merged)] == expected
