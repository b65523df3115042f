"""The report's pictures (docs/graph.md): `report.md` carries the graph and the timeline as
Mermaid blocks the real Mermaid parser takes, and `report.html` draws the same in chromium with
no console message and no remote asset."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.engine.mermaid_env import open_in_chromium, parse_mermaid
from tests.engine.scenario import DIAMOND, Scenario, diamond_rules

BLOCK = re.compile(r"```mermaid\n(.*?)```", re.S)


def run_diamond(tmp_path: Path) -> tuple[Scenario, Path]:
    """The diamond with `right` failing (so `top` waits) and a title full of Mermaid syntax."""
    stories = [dict(s) for s in DIAMOND]
    stories[0]["title"] = 'The "base" #1: [core] <b>a;b</b>'
    rules = [r for r in diamond_rules() if r["when"]["story"] != "right"]
    rules.append({"when": {"role": "coder", "story": "right"}, "fail": "error"})
    sc = Scenario.create(tmp_path, stories, rules, settings='judgeRounds = 0\ngates = ["true"]\n')
    result = sc.run()
    assert result.outcome == "failed"
    return sc, sc.repo / ".flow" / "epics" / "ep"


def test_the_report_carries_a_graph_and_a_timeline_mermaid_parses(tmp_path: Path) -> None:
    _, epic = run_diamond(tmp_path)
    markdown = (epic / "report.md").read_text()
    blocks = BLOCK.findall(markdown)
    assert [b.split("\n", 1)[0] for b in blocks] == ["flowchart LR", "gantt"]
    graph, gantt = blocks
    # Every story is a node with its status; the edges are the plan's.
    statuses = {s["id"]: s["status"] for s in json.loads((epic / "report.json").read_text())["stories"]}
    assert statuses == {"base": "done", "left": "done", "right": "failed", "top": "waiting", "docs": "done"}
    for n, (story, status) in enumerate(statuses.items()):
        assert re.search(rf'^  s{n}\["{story}: .*<br/>{status}"\]:::st_{status}$', graph, re.M), story
    assert "#quot;base#quot; #35;1" in graph  # the title's quotes and hashes, as entities
    assert sorted(re.findall(r"^  (s\d) [=-]=?-?> (s\d)$", graph, re.M)) == sorted(
        [("s0", "s1"), ("s0", "s2"), ("s1", "s3"), ("s2", "s3")]
    )
    assert re.search(r"^  class (s\d,)*s\d critical$", graph, re.M)
    # One palette for GitHub's light and dark pages: mid-tone fills under white text.
    assert re.search(r"^  classDef st_done fill:#15803d,stroke:#15803d,color:#ffffff$", graph, re.M)
    # Each lane is a section with its phases; merged and failed are milestones.
    for story in statuses:
        assert f"  section {story}\n  planned :" in gantt
    assert re.search(r"^  merged :milestone, done, p\d+, \d+, 0ms$", gantt, re.M)
    assert re.search(r"^  failed :milestone, crit, p\d+, \d+, 0ms$", gantt, re.M)
    assert re.search(r"^  gated :p\d+, \d+, \d+$", gantt, re.M)  # the `true` task gate

    parsed = parse_mermaid([*blocks, graph.replace('"]', "", 1)])
    assert parsed[:2] == [{"ok": True, "type": "flowchart-v2"}, {"ok": True, "type": "gantt"}]
    assert parsed[2]["ok"] is False  # the parser does refuse a broken block


def test_the_html_report_opens_in_chromium_with_no_console_message(tmp_path: Path) -> None:
    _, epic = run_diamond(tmp_path)
    page = epic / "report.html"
    html = page.read_text()
    assert not re.search(r"""(src|href)\s*=|url\((?!#)|@import|<script""", html)  # nothing to fetch or run
    dom, console = open_in_chromium(page, tmp_path / "profile")
    assert console == []
    nodes = dict(re.findall(r'<g class="node" data-story="(\w+)" data-status="(\w+)">', dom))
    assert nodes == {"base": "done", "left": "done", "right": "failed", "top": "waiting", "docs": "done"}
    assert dom.count('class="edge') == 4 and 'class="edge critical"' in dom
    assert re.findall(r'<text x="4" y="\d+" class="lane">(\w+)</text>', dom) == list(nodes)
    assert 'class="phase merged"' in dom and 'class="phase failed"' in dom
    # The reader's colour scheme picks the palette: deep fills under light text when dark.
    dark = html.split("@media (prefers-color-scheme: dark) {\n", 1)[1]
    assert "svg .box.st_done, .legend .st_done { fill: #14532d;" in dark
    assert "svg .phase.merged { fill: #22c55e; }" in dark
    assert 'class="box st_failed"' in dom

    broken = tmp_path / "broken.html"
    broken.write_text("<!doctype html><p>x</p><script>console.error('seen')</script>")
    assert any("seen" in line for line in open_in_chromium(broken, tmp_path / "profile2")[1])
