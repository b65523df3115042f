from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.cost.cli import cost_report_for, parse_bound
from flowd.trace.log import trace_path

from .traces import started, used, write_trace

FLOWD = str(Path(sys.executable).parent / "flowd")
CONFIG = """
timeZone = "Europe/Rome"
[prices."m"]
input = 1.0
output = 2.0
"""


def flowd(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FLOWD, "cost", *args], cwd=repo, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".flow").mkdir()
    (tmp_path / ".flow" / "config.toml").write_text(CONFIG)
    write_trace(
        tmp_path,
        "r1",
        [
            ("2026-10-24T21:30:00.000Z", started(budget=5.0)),
            (
                "2026-10-24T21:31:00.000Z",
                used(input=1_000_000, output=500_000, lane="api", executor="codex", clone=10),
            ),
            (
                "2026-10-24T22:30:00.000Z",
                used(input=1_000_000, lane="api", executor="codex", clone=2),
            ),  # 00:30 in Rome
            (
                "2026-10-25T01:30:00.000Z",
                used("reviewer", model="mystery", input=100, lane="api", executor="claude"),
            ),
        ],
    )
    write_trace(tmp_path, "r2", [("2026-10-26T09:00:00.000Z", used("planner", input=10, estimated=True))])
    return tmp_path


def test_json_report_from_a_subdirectory(repo: Path) -> None:
    (repo / "src").mkdir()
    done = flowd(repo / "src", "--json", "--runs-per-day", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["timeZone"] == "Europe/Rome"  # from config.toml
    assert report["runs"] == 2 and report["requests"] == 4
    assert report["measured"]["costUsd"] == pytest.approx(3.0)  # priced by the [prices."m"] override
    assert report["estimated"]["costUsd"] == pytest.approx(0.00001)
    assert report["unpriced"] == {"requests": 1, "tokens": 100, "models": ["mystery"]}
    assert [d["key"] for d in report["byDay"]] == ["2026-10-24", "2026-10-25", "2026-10-26"]
    assert [e["executor"] for e in report["byExecutor"]] == [
        "codex#2",
        "codex#10",
    ]  # claude ran no lane coder: byAgent counts it
    assert report["projection"]["runsPerDay"] == 2
    assert report["budgets"][0]["spentUsd"] == pytest.approx(3.0)
    assert report["skipped"] == {"files": 0, "lines": 0, "problems": []}


def test_text_and_markdown(repo: Path) -> None:
    text = flowd(repo)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("flowd cost\n")
    assert "(Europe/Rome)" in text.stdout
    assert "by executor clone (coder turns only):" in text.stdout and "codex#10" in text.stdout
    header = next(line for line in text.stdout.splitlines() if line.strip().startswith("executor"))
    row = next(line for line in text.stdout.splitlines() if "codex#10" in line)
    assert len(row) == len(header)  # an aligned table
    md = flowd(repo, "--md")
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("# flowd cost\n")
    assert "| day | runs | measured | estimated | cost |" in md.stdout
    assert "| 2026-10-25 |" in md.stdout


def test_bad_tz_and_bad_times_exit_2_with_one_sentence(repo: Path) -> None:
    for args, word in ((["--tz", "Mars/Olympus"], "--tz"), (["--since", "last tuesday"], "--since")):
        done = flowd(repo, *args)
        assert done.returncode == 2
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and word in lines[0] and "Traceback" not in done.stderr


def test_filters_and_tz_flag(repo: Path) -> None:
    only = json.loads(flowd(repo, "--json", "--run", "r2", "--tz", "UTC").stdout)
    assert only["runs"] == 1 and only["requests"] == 1 and only["timeZone"] == "UTC"
    # --until DAY includes that whole day in the report's zone (Rome): the 00:30 sample counts.
    window = json.loads(flowd(repo, "--json", "--since", "2026-10-25", "--until", "2026-10-25").stdout)
    assert window["requests"] == 2
    assert flowd(repo, "--run", "nope").returncode == 2


def test_empty_repository(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    done = flowd(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["requests"] == 0
    text = flowd(tmp_path)
    assert text.returncode == 0 and "no usage recorded" in text.stdout


def test_report_for_the_language_server(repo: Path) -> None:
    trace_path(repo, "broken").mkdir(parents=True)  # unreadable: skipped, counted, listed
    report = cost_report_for(repo, time_zone="UTC")
    assert isinstance(report, dict) and report["timeZone"] == "UTC"
    assert report["skipped"]["files"] == 1
    text = cost_report_for(repo, fmt="text")
    assert isinstance(text, str) and "skipped: 1 unreadable trace" in text
    markdown = cost_report_for(repo, run_id="r1", fmt="markdown")
    assert isinstance(markdown, str) and markdown.startswith("# flowd cost")
    with pytest.raises(InputError):
        cost_report_for(repo, fmt="yaml")
    with pytest.raises(InputError):
        cost_report_for(repo, since="2026-10-26", until="2026-10-25")


def test_parse_bound_reads_dates_and_times_in_the_zone() -> None:
    from zoneinfo import ZoneInfo

    rome = ZoneInfo("Europe/Rome")
    assert parse_bound("2026-10-25", rome, option="--since") == "2026-10-24T22:00:00.000Z"
    assert parse_bound("2026-10-25", rome, option="--until", end=True) == "2026-10-25T23:00:00.000Z"
    assert parse_bound("2026-10-25 14:00", rome, option="--since") == "2026-10-25T13:00:00.000Z"
    assert parse_bound("2026-10-25T14:00Z", rome, option="--since") == "2026-10-25T14:00:00.000Z"
    with pytest.raises(InputError, match="--until"):
        parse_bound("soon", rome, option="--until")


def test_run_id_must_name_a_run_directory(repo: Path) -> None:
    for bad in ("..", "../r1", ""):
        with pytest.raises(InputError, match="--run"):
            cost_report_for(repo, run_id=bad)


def test_outside_a_git_repository_exits_2_like_every_command(tmp_path: Path) -> None:
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    for command in (["cost"], ["status"]):
        done = subprocess.run(
            [FLOWD, *command], cwd=outside, capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr == f"flowd: {outside} is not a git repository; run flowd inside a git checkout\n"
        assert done.stdout == ""
    as_json = subprocess.run(
        [FLOWD, "cost", "--json"], cwd=outside, capture_output=True, text=True, env=env, timeout=60
    )
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {
        "error": f"{outside} is not a git repository; run flowd inside a git checkout",
        "exitCode": 2,
    }
