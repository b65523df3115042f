"""A lane that rewrites its own git admin files (docs/sandbox.md "flowd's own git"): a real run
under `enforce` on this machine's kernel, the attacker's coder turn a confined shell. Its
`commondir` (or its worktree's `.git` file) is pointed at a copy of the repository's git dir
whose config sets `core.fsmonitor` to a command: flowd's own git, unconfined, must never run it.
The `.git` file: detection reports `gitDir`, puts the file back, fails the attacker with one
sentence and never blames the victim, which finishes. `commondir`: the lane repository's is the
lane's own and followed by nothing of flowd's; the admin dir's is refused by the kernel, named."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowd.events.model import LaneEscape
from flowd.sandbox import landlock
from tests.engine.scenario import Scenario, coder, git, story


def _attack(repo: Path, kind: str, marker: Path) -> str:
    # What the `.git` file names is the lane repository (docs/sandbox.md "The lane repository");
    # its admin dir, flowd's, is the folder it lies in (a spare's admin dir has its own name).
    common, own = repo / ".git", "$(sed 's/^gitdir: //' .git)"
    admin = f'$(dirname "{own}")'
    evil = "$TMPDIR/evil"
    copy = (
        f"mkdir -p {evil}/worktrees/x && cp -r {common}/objects {common}/refs {common}/HEAD "
        f'{common}/config {evil}/ && cp "{admin}/HEAD" "{admin}/index" {evil}/worktrees/x/ && '
        f"echo ../.. > {evil}/worktrees/x/commondir && "
        f"git --git-dir={evil} config core.fsmonitor 'touch {marker}; false'"
    )
    if kind == "commondir":
        # The lane repository's (its own: flowd's git never reads it), then the admin dir's (refused).
        return f'{copy} && echo {evil} > "{own}/commondir"; echo {evil} > "{admin}/commondir"'
    return f'{copy} && echo "gitdir: {evil}/worktrees/x" > .git'


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["commondir", "dotgit"])
def test_a_lanes_rewritten_git_dir_runs_nothing_and_is_put_back(tmp_path: Path, kind: str) -> None:
    assert landlock.abi() >= 1, "this test needs the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    marker = tmp_path / "repo" / "PWNED"  # the user's checkout: a confined lane cannot write it
    repo = tmp_path / "repo"
    attacker = coder("x", {"src/x/x.py": "X = 1\n"}, run=[_attack(repo, kind, marker)])
    victim = coder("v", {"src/v/v.py": "V = 1\n"})
    sc = Scenario.create(
        tmp_path,
        [story("v", ["src/v/"]), story("x", ["src/x/"])],
        [victim, attacker],
        settings="judgeRounds = 0\nmaxReviewRounds = 1\n",
    )

    result = sc.run()

    assert not marker.exists(), "flowd's own git ran the lane's core.fsmonitor"
    escapes = [e.event for e in sc.events(result.run_id) if isinstance(e.event, LaneEscape)]
    wt = sc.worktree_root / "ep" / "x"
    name = "commondir" if kind == "commondir" else ".git"
    hits = [e for e in escapes if Path(e.path).name == name]
    assert {e.lane for e in escapes} == {"x"}  # never the victim
    lanes = result.view.lanes
    if kind == "commondir":
        # The kernel refuses the admin dir's, and names it; the lane repository's changes nothing.
        assert [(e.lane, e.what, e.action) for e in hits] == [("x", "gitDir", "denied")], escapes
        assert lanes["x"].status == "done" and lanes["v"].status == "done"
        git(repo, "fsck", "--full")
        return
    assert [(e.lane, e.what, e.action) for e in hits] == [("x", "gitDir", "undone")], escapes
    assert lanes["x"].status == "failed"
    reason = lanes["x"].reason or ""
    assert reason.startswith(
        f"story 'x' wrote past its lane: it changed {hits[0].path} (its worktree's git admin"
    )
    assert lanes["v"].status == "done"
    assert "src/v/v.py" in git(repo, "ls-tree", "-r", "--name-only", "epic/ep")
    if wt.exists():  # a failed story's worktree is kept: its admin files say what git wrote
        admin = Path((wt / ".git").read_text().removeprefix("gitdir: ").strip())
        assert admin.parent == repo / ".git" / "worktrees"
        assert (admin / "commondir").read_text() == "../..\n"
        assert (admin / "gitdir").read_text() == f"{wt / '.git'}\n"
    git(repo, "fsck", "--full")
