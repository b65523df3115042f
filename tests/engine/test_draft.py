"""`flowd plan new`: a real subprocess in a temp git repository with a scripted planner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flowd.engine.draft import brief_title, check_proposal, epic_id_for
from flowd.plan.parse import load_plan

FLOWD = [sys.executable, "-m", "flowd"]


def story(sid: str, owned: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": sid, "title": sid.title(), "description": f"Build {sid}.", "owned": owned,
            "acceptance": [f"{sid} works", f"{sid} is tested"], **extra}  # fmt: skip


VALID = {
    "epicId": "whatever-the-model-says",
    "epic": "echoed",
    "stories": [
        story("api", ["src/api/", "tests/test_api.py"], readFirst=["src/app.py", "docs/missing.md"]),
        story("ui", ["src/ui/", "tests/test_ui.py"], dependsOn=["api"], provides=["the login form"]),
    ],
}
INVALID = {
    "epicId": "x",
    "epic": "x",
    "stories": [story("api", ["src/"]), story("ui", ["src/ui/"], acceptance=[])],
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("app = 1\n", encoding="utf-8")
    (root / "README.md").write_text("# app\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True)
    return root


def scripted(repo: Path, rules: list[dict[str, Any]], roles: str = '["planner"]') -> None:
    flow = repo / ".flow"
    flow.mkdir(exist_ok=True)
    (flow / "planner.script.json").write_text(json.dumps({"rules": rules}), encoding="utf-8")
    (flow / "roster.toml").write_text(
        f'[[executors]]\nid = "drafter"\nkind = "script"\nscript = "planner.script.json"\nroles = {roles}\n',
        encoding="utf-8",
    )


def plan_new(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FLOWD_SCRIPT_STATE": str(repo.parent / "script-state"),
        "XDG_CONFIG_HOME": str(repo.parent / "config"),  # no user-level roster
    }
    return subprocess.run(
        [*FLOWD, "plan", "new", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=60
    )


def test_a_scripted_planner_drafts_a_valid_markdown_plan(repo: Path) -> None:
    scripted(repo, [{"when": {"role": "planner", "prompt": "Epic: Add password login"},
                     "reply": f"Here it is:\n```json\n{json.dumps(VALID)}\n```"}])  # fmt: skip
    proc = plan_new(repo, "Add password login", "-o", "login.md")
    assert proc.returncode == 0, proc.stderr
    assert "login.md: drafted 2 stories in 2 waves" in proc.stdout
    assert "dropped readFirst 'docs/missing.md' of story 'api'" in proc.stderr
    text = (repo / "login.md").read_text(encoding="utf-8")
    assert "```json storyplan" in text
    plan = load_plan(repo / "login.md")
    assert plan.epic_id == epic_id_for("Add password login") and plan.epic_id.startswith(
        "add-password-login-"
    )
    assert plan.epic == "Add password login"
    assert plan.require("api").read_first == ["src/app.py"]
    assert plan.require("ui").depends_on == ["api"]
    # The planner ran in a throwaway checkout: the user's checkout is as it was, no worktree left.
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True)
    assert sorted(status.stdout.splitlines()) == ["?? .flow/", "?? login.md"]
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True)
    assert len(worktrees.stdout.splitlines()) == 1


def test_an_invalid_first_proposal_is_repaired_with_its_violations(repo: Path) -> None:
    scripted(
        repo,
        [
            {"when": {"role": "planner", "prompt": "(?s)proposed plan is invalid.*both own.*no acceptance"},
             "reply": json.dumps(VALID)},
            {"when": {"role": "planner"}, "reply": json.dumps(INVALID)},
        ],
    )  # fmt: skip
    proc = plan_new(repo, "Add password login", "-o", "login.json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((repo / "login.json").read_text(encoding="utf-8"))
    assert [s["id"] for s in data["stories"]] == ["api", "ui"]
    assert load_plan(repo / "login.json").stories[1].provides == ["the login form"]


def test_a_proposal_still_invalid_names_its_violations_and_writes_nothing(repo: Path) -> None:
    scripted(repo, [{"when": {"role": "planner"}, "reply": json.dumps(INVALID)}])
    proc = plan_new(repo, "Add password login", "-o", "login.json")
    assert proc.returncode == 2
    assert proc.stderr.startswith("flowd: the planner's plan is still invalid after one repair")
    assert "story 'ui' has no acceptance criteria" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (repo / "login.json").exists()


def test_an_existing_file_is_kept_unless_forced(repo: Path) -> None:
    scripted(repo, [{"when": {"role": "planner"}, "reply": json.dumps(VALID)}])
    (repo / "login.json").write_text("mine\n", encoding="utf-8")
    refused = plan_new(repo, "Add password login", "-o", "login.json")
    assert refused.returncode == 2 and "login.json already exists" in refused.stderr
    assert (repo / "login.json").read_text(encoding="utf-8") == "mine\n"
    forced = plan_new(repo, "Add password login", "-o", "login.json", "--force")
    assert forced.returncode == 0, forced.stderr
    assert load_plan(repo / "login.json").stories[0].id == "api"


def test_no_planner_in_the_roster_is_one_sentence_and_exit_2(repo: Path) -> None:
    scripted(repo, [], roles='["coder"]')
    proc = plan_new(repo, "Add password login", "-o", "login.json")
    assert proc.returncode == 2
    assert "no executor in the roster takes the planner role" in proc.stderr
    assert not (repo / "login.json").exists()


def test_a_brief_is_the_planners_input(repo: Path) -> None:
    brief = repo.parent / "brief.md"
    brief.write_text("# Password login\n\nUse bcrypt; sessions in cookies.\n", encoding="utf-8")
    scripted(repo, [{"when": {"role": "planner", "prompt": "(?s)Epic: Password login.*Use bcrypt"},
                     "reply": json.dumps(VALID)}])  # fmt: skip
    proc = plan_new(repo, "-o", "login.md", "--brief", str(brief))
    assert proc.returncode == 0, proc.stderr
    assert load_plan(repo / "login.md").epic == "Password login"


def test_check_proposal_overrides_the_epic_and_reports_every_problem() -> None:
    proposal = check_proposal(json.dumps(INVALID), "my-epic-abc123", "My epic", ["src/app.py"])
    assert proposal.plan is not None and proposal.plan.epic_id == "my-epic-abc123"
    assert any("both own" in p for p in proposal.problems)
    assert (
        "story 'ui' has no acceptance criteria: give 2-6 observable 'done when' outcomes" in proposal.problems
    )
    assert check_proposal("no json here", "e", "E", []).problems == [
        "your reply holds no valid JSON: answer with the JSON object only, no prose"
    ]
    assert check_proposal('{"stories": [{"id": "a"}]}', "e", "E", []).problems == [
        "stories[0].title: is required"
    ]
    assert brief_title("\n## Login\ntext") == "Login" and brief_title("plain first\nline") == "plain first"
    assert epic_id_for("!!!").startswith("epic-")
