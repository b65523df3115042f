"""The epic report spans the epic's runs: a story merged in an earlier run keeps its figures."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.scenario import Scenario, coder, story


def test_a_resumed_epic_reports_every_story_and_the_epic_over_all_runs(tmp_path: Path) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"])]
    usage_a = {"input": 1000, "output": 100, "costUsd": 0.5}
    rules = [
        coder("a", {"a.txt": "a"}, usage=usage_a),
        {"when": {"role": "coder", "story": "b"}, "fail": "error"},
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    first = sc.run()
    assert first.outcome == "failed"
    sc.write_script(
        [
            coder("a", {"a.txt": "a"}),
            coder("b", {"b.txt": "b"}, usage={"input": 400, "output": 40, "costUsd": 0.25}),
        ]
    )
    second = sc.run()
    assert second.outcome == "done" and second.run_id != first.run_id

    report = json.loads((sc.repo / ".flow" / "epics" / "ep" / "report.json").read_text())
    assert report["runId"] == second.run_id
    assert report["runs"] == [first.run_id, second.run_id]
    lines = {line["id"]: line for line in report["stories"]}
    a, b = lines["a"], lines["b"]
    # a merged in the first run: its figures come from there, and the report says so.
    assert a["status"] == "done" and a["tokens"] == first.view.lanes["a"].tokens > 0
    assert a["costUsd"] == 0.5 and a["note"] == f"merged in run {first.run_id}" and a["executor"] == "demo"
    # b spent in both runs.
    assert b["tokens"] == first.view.lanes["b"].tokens + second.view.lanes["b"].tokens
    assert b["costUsd"] == 0.25
    # This run's totals, and the epic's over both runs.
    assert report["tokens"] == second.view.totals.tokens
    assert report["epicTokens"] == first.view.totals.tokens + second.view.totals.tokens
    assert report["epicCostUsd"] == 0.75
    markdown = (sc.repo / ".flow" / "epics" / "ep" / "report.md").read_text()
    assert f"- Epic so far, over 2 runs: {report['epicTokens']:,} tokens, $0.75" in markdown
    assert (
        f"| a | done | `story/ep/a` | {'~' if a['estimated'] else ''}{a['tokens']:,} | $0.50 | demo | merged in run {first.run_id} |"
        in markdown
    )
    assert "| Story | Status | Branch | Tokens (all runs) | Cost (all runs) | Executor | Note |" in markdown
