"""`flowd plan validate` through the installed entry point, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.plan.helpers import plan_json, story

FLOWD = Path(sys.executable).parent / "flowd"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLOWD), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_valid_plan_exits_0_with_a_summary(tmp_path: Path) -> None:
    (tmp_path / "auth.epic.json").write_text(plan_json(story("a"), story("b", dependsOn=["a"])))
    result = run("plan", "validate", "auth.epic.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "auth.epic.json: valid, 2 stories in 2 waves\n"
    assert result.stderr == ""


def test_invalid_plan_prints_each_violation_with_1_based_positions(tmp_path: Path) -> None:
    text = plan_json(story("a", dependsOn=["a"]), story("b", owned=["src/a/x"]))
    (tmp_path / "bad.json").write_text(text)
    result = run("plan", "validate", "bad.json", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    self_dep = text.index('"a"', text.index('"dependsOn"'))
    line = text.count("\n", 0, self_dep) + 1
    column = self_dep - text.rfind("\n", 0, self_dep)
    assert lines[0] == f"bad.json:{line}:{column}: story 'a' depends on itself"
    assert lines[1].endswith(": stories 'a' and 'b' both own 'src/a' / 'src/a/x'")
    assert lines[2] == "bad.json: invalid, 2 violations"


def test_json_output(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(plan_json(story("a", owned=[])))
    result = run("plan", "validate", "bad.json", "--json", cwd=tmp_path)
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["plan"] == "bad.json" and document["valid"] is False
    (v,) = document["violations"]
    assert v["code"] == "plan.ownsNothing" and v["story"] == "a" and v["field"] == "owned"
    assert {"line", "column", "endLine", "endColumn", "message"} <= set(v)

    (tmp_path / "ok.json").write_text(plan_json(story("a")))
    ok = run("plan", "validate", "ok.json", "--json", cwd=tmp_path)
    assert ok.returncode == 0 and json.loads(ok.stdout) == {
        "plan": "ok.json",
        "valid": True,
        "violations": [],
    }


def test_markdown_plan_with_bad_json(tmp_path: Path) -> None:
    (tmp_path / "plan.md").write_text('# Epic\n\n```json storyplan\n{"epicId": "e",\n  "stories": [}\n```\n')
    result = run("plan", "validate", "plan.md", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.startswith("plan.md:5:15: the ```json storyplan block is not valid JSON")


def test_unreadable_plan_is_one_sentence_on_stderr(tmp_path: Path) -> None:
    result = run("plan", "validate", "missing.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == "flowd: missing.json: no such plan file; check the path\n"


BROKEN = """{
  "epicId": "auth",
  "stories": [
    {"id": "x", "title": "X", "owned": [], "dependsOn": ["x"]},
    {"id": "model", "title": 3, "owned": ["src/m.py"]},
    {"id": "api", "title": "API", "owned": ["src/m.py"], "dependsOn": ["modle"]}
  ]
}
"""
BROKEN_LINES = [
    "bad.epic.json:4:31: story 'x' owns no paths",
    "bad.epic.json:4:58: story 'x' depends on itself",
    "bad.epic.json:5:30: stories[1].title: Input should be a valid string",
    "bad.epic.json:6:45: stories 'model' and 'api' both own 'src/m.py' / 'src/m.py'",
    "bad.epic.json:6:72: story 'api' depends on unknown story 'modle'; did you mean 'model'?",
    "bad.epic.json: invalid, 5 violations",
]


def _git_repo(path: Path) -> None:
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=path,
            check=True,
            capture_output=True,
        )


def test_a_shape_error_hides_no_other_violation_and_all_come_in_line_order(tmp_path: Path) -> None:
    (tmp_path / "bad.epic.json").write_text(BROKEN)
    result = run("plan", "validate", "bad.epic.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.splitlines() == BROKEN_LINES


def test_flowd_run_prints_plan_errors_as_plan_validate_does(tmp_path: Path) -> None:
    _git_repo(tmp_path)
    (tmp_path / "bad.epic.json").write_text(BROKEN)
    result = run("run", "bad.epic.json", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == BROKEN_LINES
    assert not (tmp_path / ".flow").exists()  # an invalid plan touches nothing
    # With --json the error is a JSON document on stdout, with every violation.
    as_json = run("run", "bad.epic.json", "--json", cwd=tmp_path)
    assert as_json.returncode == 2
    document = json.loads(as_json.stdout)
    assert document["error"] == "bad.epic.json: invalid, 5 violations" and document["exitCode"] == 2
    assert [v["code"] for v in document["violations"]] == [
        "plan.ownsNothing",
        "plan.dependsOnItself",
        "plan.shape",
        "plan.overlap",
        "plan.unknownDependency",
    ]


def test_an_unreadable_plan_with_json_still_prints_a_document(tmp_path: Path) -> None:
    result = run("plan", "validate", "missing.json", "--json", cwd=tmp_path)
    assert result.returncode == 2
    document = json.loads(result.stdout)
    assert document["valid"] is False
    assert document["violations"] == [
        {"code": "plan.unreadable", "message": "missing.json: no such plan file; check the path"}
    ]
    assert result.stderr == "flowd: missing.json: no such plan file; check the path\n"
