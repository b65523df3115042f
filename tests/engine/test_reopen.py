"""Reopening a story that is not running: a revision task appended to its checkpoint on disk."""

from __future__ import annotations

from pathlib import Path

from flowd.engine.reopen import reopen_with_revision
from flowd.engine.state import EpicPaths
from flowd.tasks.checkpoint import parse_checkpoint, render_checkpoint
from flowd.tasks.model import Task, TaskPlan

JUDGE = "Revision 1: close the judge's findings"


def test_reopen_a_stopped_story_in_its_checkpoint(tmp_path: Path) -> None:
    paths = EpicPaths(tmp_path, "ep")
    assert reopen_with_revision(paths, "s", "fix line 3", "A review comment.", "- x") is None
    assert not paths.checkpoint("s").exists()  # nothing planned: nothing written
    paths.stories.mkdir(parents=True)
    paths.checkpoint("s").write_text(
        render_checkpoint(
            TaskPlan(
                story_id="s",
                tasks=[Task(title="Add login", completed=True), Task(title=JUDGE, completed=True)],
            )
        )
    )
    task = reopen_with_revision(paths, "s", "fix line 3", "A review comment.", "- x")
    assert task is not None and task.title == "Revision 2: fix line 3"
    again = parse_checkpoint(paths.checkpoint("s").read_text())
    assert [t.title for t in again.tasks] == ["Add login", JUDGE, "Revision 2: fix line 3"]
    assert again.next_incomplete() == (3, again.tasks[2])
    assert again.tasks[2].description.startswith("A review comment.\nClose these gaps")
