"""The escape campaign (docs/sandbox.md "The escape campaign"): a real run on this machine's
kernel, whose attacker story tries every technique of tests/sandbox/campaign.py from its coder's
turn (the scripted agent's shell commands) and from its task gate, while a victim story works
beside it. Under `enforce` nothing lands, every refusal is named in the attacker's findings and
as a `LaneEscape` `denied`, the victim is never blamed, and both stories still finish."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flowd.sandbox import landlock
from tests.engine.scenario import Scenario, coder, git, story
from tests.sandbox.campaign import SECRET, TECHNIQUES, fill, write_scripts


def _home(root: Path) -> Path:
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n", encoding="utf-8")
    (home / ".bashrc").write_text("# the user's shell\n", encoding="utf-8")
    (home / ".gitconfig").write_text("[user]\n\tname = user\n\temail = user@example.com\n", encoding="utf-8")
    return home


def _snapshot(paths: list[Path]) -> dict[Path, bytes | None]:
    return {p: p.read_bytes() if p.is_file() else None for p in paths}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_no_technique_lands_from_an_agent_turn_or_a_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert landlock.abi() >= 1, "this test needs the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    home = _home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    repo, lanes = tmp_path / "repo", tmp_path / "repo.flowd" / "ep"
    places = {
        "R": str(repo), "C": str(repo / ".git"), "H": str(home), "B": str(lanes / "b"),
        "E": str(lanes / "_epic"), "A": str(lanes / "a"), "UP": "../../../repo",
    }  # fmt: skip
    scripts = write_scripts(tmp_path, places)
    findings_a = repo / ".flow" / "epics" / "ep" / "stories" / "a.findings.md"
    # The victim keeps its worktree (and its admin dir) until the attacker's gate has been refused there.
    wait_for_gate = (
        f"for i in $(seq 1200); do grep -q INTRUDER-gate {findings_a} 2>/dev/null && break; sleep 0.1; done"
    )
    rules = [
        coder("a", {"evil/a.txt": "a\n"}, run=[f"sh {scripts['agent']}"]),
        coder("b", {"b.txt": "b\n"}, run=[wait_for_gate]),
    ]
    sc = Scenario.create(
        tmp_path,
        [story("a", ["evil/"]), story("b", ["b.txt"])],
        rules,
        settings=f'gates = ["sh {scripts["gate"]}"]\njudgeRounds = 0\ngateRetries = 0\n',
    )
    git(repo, "checkout", "-q", "-b", "work")  # `main` is free to move, were a lane able to
    flow = repo / ".flow"
    watched = [flow / "config.toml", flow / "roster.toml", repo / ".git" / "config", home / ".bashrc",
               home / ".gitconfig", repo / "README.md"]  # fmt: skip
    before = _snapshot(watched)
    main_before = git(repo, "rev-parse", "main")

    result = sc.run()

    # Both stories finish: confinement leaves git, the agent and the gates working in the lane.
    assert result.outcome == "done", result.view
    # 0 land.
    assert _snapshot(watched) == before
    assert git(repo, "rev-parse", "main") == main_before
    branches = git(repo, "branch", "--format=%(refname:short)").split()
    assert sorted(branches) == ["epic/ep", "main", "story/ep/a", "story/ep/b", "work"]
    assert "evil" not in git(repo, "log", "--format=%s", "--all")
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert "evil" not in (repo / ".git" / "info" / "exclude").read_text(encoding="utf-8")  # flowd adds .flow/
    leftovers = [
        p.name for p in repo.iterdir() if p.name not in (".git", ".flow", "README.md", "ep.epic.json")
    ]
    assert leftovers == []
    # flowd's own binder cache (flowd/sandbox/bind.py) is the one new entry of $HOME.
    assert sorted(p.name for p in home.iterdir()) in (
        [".bashrc", ".gitconfig", ".ssh"],
        [".bashrc", ".cache", ".gitconfig", ".ssh"],
    )
    assert (
        [p.name for p in (home / ".cache").iterdir()] in ([], ["flowd"])
        if (home / ".cache").exists()
        else True
    )
    assert not list(tmp_path.glob("repo.flowd/ep/_epic/INTRUDER-*"))
    trace = next((flow / "runs").glob("*/trace.jsonl")).read_text(encoding="utf-8")
    assert "\nevil\n" not in trace
    state = flow / "roster-state.json"
    assert not state.exists() or state.read_text(encoding="utf-8") != "{}\n"
    every_commit = subprocess.run(
        ["git", "log", "--all", "-p"], cwd=repo, capture_output=True, text=True
    ).stdout
    assert SECRET not in every_commit
    # Each refusal named in the attacker's findings, by who tried it, and as a LaneEscape.
    lines = findings_a.read_text(encoding="utf-8").splitlines()
    escapes = [e.event for e in sc.events(result.run_id) if e.event.type == "LaneEscape"]
    assert escapes and all(e.lane == "a" and e.action == "denied" for e in escapes)  # type: ignore[union-attr]
    named = {e.path for e in escapes}  # type: ignore[union-attr]
    missing = []
    for tag, by in (("agent", "its agent"), ("gate", f"`sh {scripts['gate']}`")):
        for name, _, expected in TECHNIQUES:
            path = fill(expected, places, tag)
            if not any(path in line and by in line for line in lines) or not any(path in p for p in named):
                missing.append(f"{tag}: {name} ({path})")
    assert missing == [], "\n".join(lines)
    assert len(TECHNIQUES) >= 25
    # The victim is never blamed.
    b_findings = repo / ".flow" / "epics" / "ep" / "stories" / "b.findings.md"
    assert not b_findings.exists() or "Confinement" not in b_findings.read_text(encoding="utf-8")
