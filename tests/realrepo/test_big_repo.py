"""Big repositories fast by default (docs/repositories.md "Big repositories"), on a generated
25,000-file repository: with nothing set, a run keeps spares between runs within the disk budget
and makes its story worktrees sparse, and says so once in its first lines; a gate red in such a
worktree makes it whole and runs again; the user's own settings always win."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowd.control.progress import plain_lines
from flowd.engine.big_repo import checkout_size, worktree_choice
from flowd.engine.runner import RunResult
from flowd.engine.spares import fill, kept_root, waiting
from flowd.store.config import load_settings
from flowd.trace.view import RunView
from flowd.vcs import sparse
from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, story
from tests.realrepo.bigrepo import FILES, clone, generate

pytestmark = pytest.mark.slow  # a 25,000-file checkout each, an epic on most


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """The folders this module's tests made, removed after the last test (bigrepo.py says why)."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory, made: list[Path]) -> Path:
    where = tmp_path_factory.mktemp("big-origin")
    made.append(where)
    return generate(where / "origin", checkout=False)


@pytest.fixture
def checkout(origin: Path, tmp_path: Path, made: list[Path]) -> Path:
    """A user's checkout of the big repository; it and every worktree a run made beside it are
    removed with the module's other folders."""
    made.append(tmp_path)
    return clone(origin, tmp_path / "repo")


def _scenario(
    repo: Path, stories: list[dict[str, object]], rules: list[dict[str, object]], config: str
) -> Scenario:
    """`Scenario`'s epic, roster and settings in an existing checkout (`repo`)."""
    plan = repo / "ep.epic.json"
    plan.write_text(json.dumps({"epicId": "ep", "epic": "big", "stories": stories}), encoding="utf-8")
    (repo / ".flow").mkdir()
    sc = Scenario(repo, plan)
    sc.write_script(rules)
    sc.executors = [{"id": "demo", "script": "script.json", "slots": 3}]
    sc.write_roster()
    (repo / ".flow" / "config.toml").write_text(
        "judgeRounds = 0\nmaxReviewRounds = 1\n" + config, encoding="utf-8"
    )
    return sc


def _said(sc: Scenario, result: RunResult) -> list[tuple[int, str]]:
    return [
        (n, e.event.message)
        for n, e in enumerate(sc.events(result.run_id))
        if type(e.event).__name__ == "Info" and "big repository" in e.event.message
    ]


STORIES = [story("a", ["pkg0000/new_a.py"]), story("b", ["pkg0001/new_b.py"])]


def test_the_size_is_read_from_the_index(checkout: Path) -> None:
    size = checkout_size(Repo(checkout))
    assert size is not None and size.files == FILES + 1  # and the README
    # Each file a few dozen bytes: one 4 KiB block each on this file system.
    assert size.disk_bytes == (FILES + 1) * 4096


def _sees(sid: str, n: int) -> dict[str, object]:
    """The story's coder writes into its one file whether its worktree holds a folder outside its
    perimeter ("whole") or not ("sparse")."""
    seen = f"if test -f pkg0100/mod00.py; then echo whole; else echo sparse; fi > pkg000{n}/new_{sid}.py"
    return coder(sid, run=[seen])


def test_by_default_a_big_checkout_gets_sparse_worktrees_and_kept_spares_said_once(checkout: Path) -> None:
    rules = [_sees("a", 0), _sees("b", 1)]
    sc = _scenario(checkout, STORIES, rules, 'gates = ["true"]\nconcurrency = 2\n')
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    said = _said(sc, result)
    assert len(said) == 1, said
    at, message = said[0]
    assert at <= 2, at  # right after RunStarted: the run's first lines
    assert message.startswith(f"big repository ({FILES + 1:,} files, about 102 MB a checkout): ")
    assert "keeping up to 3 spare worktrees between runs (about 307 MB of disk" in message
    assert "spareDiskBudgetMb = 2048" in message and "([worktree] sparse)" in message
    # `flowd run` prints it once, as its second line (after the epic's).
    view = RunView(run_id=result.run_id)
    printed: list[str] = []
    for envelope in sc.events(result.run_id):
        view.apply(envelope)
        printed += plain_lines(view, envelope)
    assert [n for n, line in enumerate(printed) if "big repository" in line] == [1], printed[:3]
    # Two lanes and the train's candidate, kept for the next run (the in-process run fills the
    # pool before it returns).
    assert len(waiting(kept_root(sc.worktree_root))) == 3
    assert git(checkout, "show", "epic/ep:pkg0000/new_a.py") == "sparse\n"
    assert git(checkout, "show", "epic/ep:pkg0001/new_b.py") == "sparse\n"
    assert not sparse.is_sparse(checkout) and not sparse.is_sparse(sc.worktree_root / "ep" / "_epic")


def test_the_disk_budget_limits_the_spares_kept(checkout: Path) -> None:
    (checkout / ".flow").mkdir()
    (checkout / ".flow" / "config.toml").write_text("[worktree]\nspareDiskBudgetMb = 250\n", encoding="utf-8")
    repo = Repo(checkout)
    chosen = worktree_choice(repo, load_settings(checkout), concurrency=4)
    assert (chosen.keep_spares, chosen.sparse) == (2, True)  # 250 MB holds two 102 MB checkouts, not 5
    assert chosen.said is not None and "keeping up to 2 spare worktrees" in chosen.said
    root = checkout.parent / "repo.flowd"
    assert fill(repo, root, chosen.keep_spares) == 2
    assert len(waiting(kept_root(root))) == 2
    (checkout / ".flow" / "config.toml").write_text("[worktree]\nspareDiskBudgetMb = 50\n", encoding="utf-8")
    chosen = worktree_choice(repo, load_settings(checkout), concurrency=4)
    assert chosen.keep_spares == 0 and chosen.said is not None
    assert (
        "keeping no spare worktree between runs (one is 102 MB, over [worktree] spareDiskBudgetMb = 50)"
        in chosen.said
    )


def test_the_users_settings_win(checkout: Path) -> None:
    rules = [_sees("a", 0), _sees("b", 1)]
    config = 'gates = ["true"]\nconcurrency = 2\n[worktree]\nkeepSpares = 0\nsparse = false\n'
    sc = _scenario(checkout, STORIES, rules, config)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert _said(sc, result) == []
    assert git(checkout, "show", "epic/ep:pkg0000/new_a.py") == "whole\n"
    assert waiting(kept_root(sc.worktree_root)) == []
    # One set, the other chosen: only the other is said.
    (checkout / ".flow" / "config.toml").write_text("[worktree]\nsparse = false\n", encoding="utf-8")
    chosen = worktree_choice(Repo(checkout), load_settings(checkout), concurrency=2)
    assert (chosen.keep_spares, chosen.sparse) == (3, False)
    assert chosen.said is not None and "sparse" not in chosen.said


def test_a_gate_red_in_a_chosen_sparse_worktree_makes_it_whole(checkout: Path) -> None:
    rules = [coder(s, {f"pkg000{n}/new_{s}.py": "X = 1\n"}) for n, s in enumerate("ab")]
    # A gate that reads a folder outside every story's perimeter.
    config = 'gates = ["test -f pkg0200/mod00.py"]\nconcurrency = 1\n[worktree]\nkeepSpares = 0\n'
    sc = _scenario(checkout, [STORIES[0], story("b", ["pkg0001/new_b.py"], ["a"])], rules, config)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    events = sc.events(result.run_id)
    widened = [e for e in events if type(e.event).__name__ == "Info" and "a gate was red" in e.event.message]
    assert len(widened) == 1 and widened[0].event.lane == "a"
    # b started after: whole from the start, so its gates were green at once.
    red = [e.event.lane for e in events if type(e.event).__name__ == "GateResult" and not e.event.ok]
    assert set(red) == {"a"}, red
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
