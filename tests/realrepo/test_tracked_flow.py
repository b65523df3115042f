"""A team that tracks its flowd settings (`.flow/config.toml`, `.flow/roster.toml`, the scripted
agent's script) in git: every story still runs, and no flowd commit, diff, perimeter check,
catch-up merge or clean-up stages, flags or removes those tracked files (docs/repositories.md)."""

from __future__ import annotations

from pathlib import Path

from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, story

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _track_flow(sc: Scenario) -> None:
    git(sc.repo, *ID, "add", "-f", ".flow/config.toml", ".flow/roster.toml", ".flow/script.json")
    git(sc.repo, *ID, "commit", "-q", "-m", "track the team's flowd settings")


def test_an_epic_runs_when_the_team_tracks_its_flow_settings(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"]), story("c", ["c.txt"], ["a", "b"])]
    # Story a's agent also edits its worktree's copy of a tracked settings file.
    rules = [
        coder("a", {"a.txt": "a\n", ".flow/config.toml": "judgeRounds = 9\n"}),
        coder("b", {"b.txt": "b\n"}),
        coder("c", {"c.txt": "c\n"}),
    ]
    sc = Scenario.create(
        tmp_path, stories, rules, settings='gates = ["test -f README.md"]\njudgeRounds = 0\n'
    )
    _track_flow(sc)
    tracked_before = {p: git(sc.repo, "show", f"HEAD:{p}") for p in git(sc.repo, "ls-files", ".flow").split()}
    result = sc.run()
    assert result.outcome == "done", result.view.lanes
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b", "ep: merge story c"]
    files = sc.epic_files()
    assert {"a.txt", "b.txt", "c.txt"} <= set(files)
    # The tracked settings reach the epic branch exactly as committed, and nothing else of `.flow/`.
    assert sorted(f for f in files if f.startswith(".flow/")) == sorted(tracked_before)
    for path, text in tracked_before.items():
        assert git(sc.repo, "show", f"epic/ep:{path}") == text
    # No flowd commit touched `.flow/`.
    touched = git(sc.repo, "log", "--format=", "--name-only", "main..epic/ep", "--", ".flow").split()
    assert touched == []
    # The user's checkout still has its tracked settings, clean.
    assert git(sc.repo, "status", "--porcelain", "--", ".flow") == ""


def test_git_operations_leave_tracked_flow_files_alone(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})])
    _track_flow(sc)
    repo = Repo(sc.repo)
    repo.ensure_flow_excluded()
    wt = repo.worktree_add(tmp_path / "wt", "story/x", "HEAD")
    # A run's state appears beside the tracked settings; an agent edits a tracked settings file.
    (wt / ".flow" / "epics").mkdir()
    (wt / ".flow" / "epics" / "state.json").write_text("{}", encoding="utf-8")
    (wt / ".flow" / "config.toml").write_text("judgeRounds = 5\n", encoding="utf-8")
    (wt / "a.txt").write_text("a\n", encoding="utf-8")
    assert repo.status_paths(wt) == ["a.txt"]
    assert repo.changed_files(wt, "main") == ["a.txt"]
    patch = repo.diff(wt, "main")
    assert "a.txt" in patch and ".flow/" not in patch
    sha = repo.commit_all(wt, "story a")
    assert sha is not None
    assert git(wt, "show", "--name-only", "--format=", "HEAD").split() == ["a.txt"]
    # Catch-up merge of a branch that changed a tracked settings file, then clean-up.
    git(sc.repo, *ID, "commit", "-q", "--allow-empty", "-m", "moved on")
    result = repo.merge(wt, "main", "catch up")
    assert result.ok
    repo.restore_paths(wt, ["a.txt"], "main")
    repo.commit_all(wt, "undo a")
    assert git(wt, "ls-files", ".flow").split() == [
        ".flow/config.toml",
        ".flow/roster.toml",
        ".flow/script.json",
    ]
    repo.reset_hard(wt, sha)
    # Clean-up without force: the edited tracked settings file is no work to keep.
    (wt / ".flow" / "roster.toml").write_text("# edited\n", encoding="utf-8")
    repo.worktree_remove(wt)
    assert not wt.exists()
    assert git(sc.repo, "ls-files", ".flow").split() == [
        ".flow/config.toml",
        ".flow/roster.toml",
        ".flow/script.json",
    ]
    assert (sc.repo / ".flow" / "config.toml").exists()
