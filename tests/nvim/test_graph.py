"""`:FlowGraph` in headless Neovim 0.11 against a real server and run (docs/editors.md): the graph
buffer's layers, signs and critical marks match `flow/graph` at launch, mid-run and at the end,
the timeline buffer draws each lane, and <CR> opens a story's worktree."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nvim.conftest import drive
from tests.server.demo_repo import delay, kill_runs, sample

SIGNS = {
    "planned": "○",
    "active": "●",
    "queued": "◔",
    "merging": "◑",
    "done": "✓",
    "failed": "✗",
    "waiting": "‖",
}


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    def tune(rules: list[dict[str, Any]]) -> None:
        delay(rules, "coder", "core", 2000)
        delay(rules, "coder", "parser", 4000)

    root, plan = sample(tmp_path / "calc", tune)
    yield root, plan
    kill_runs(root)


def cells(lines: list[str]) -> dict[str, tuple[str, bool, int]]:
    """story → (its sign, whether marked critical, its layer) as the graph buffer draws it."""
    header = lines[2]
    starts = [m.start() for m in re.finditer(r"L\d+", header)]
    found = {}
    for line in lines[3:]:
        if not line.strip():
            break
        for m in re.finditer(r"(\S) ([a-z]+)( \*)?", line):
            layer = max(i for i, s in enumerate(starts, 1) if len(line[: m.start()]) >= s)
            found[m.group(2)] = (m.group(1), m.group(3) is not None, layer)
    return found


def test_flowgraph_draws_the_server_graph_live(nvim: Path, demo: tuple[Path, Path], tmp_path: Path) -> None:
    repo, plan = demo
    out = drive(nvim, "graph.lua", tmp_path, {"REPO": str(repo), "PLAN": str(plan)})
    assert out["filetypes"] == ["flowgraph", "flowtimeline"]
    assert [p["name"] for p in out["points"]] == ["launch", "mid-run", "end"]
    for point in out["points"]:
        lines, server = point["graph"], point["server"]
        assert lines[0].startswith(f"graph of epic calc  run {out['run_id']}")
        drawn = cells(lines)
        assert drawn == {
            s["id"]: (SIGNS[s["status"]], s["critical"], {"core": 1, "docs": 1, "cli": 3}.get(s["id"], 2))
            for s in server["stories"]
        }, point["name"]
        assert "cli ← parser, format" in lines and "parser ← core" in lines
        critical = [s["id"] for s in server["stories"] if s["critical"]]
        assert f"critical path: {' → '.join(critical)}" in lines
        timeline = point["timeline"]
        assert timeline[0].startswith("timeline of epic calc") and timeline[2].startswith(
            ". planned  = coding"
        )
        bars = {line.split()[0]: line for line in timeline[4::2]}
        assert set(bars) == {"core", "parser", "format", "cli", "docs"}, point["name"]
    launch, mid, end = (p["graph"] for p in out["points"])
    assert cells(launch)["core"][0] == "●" and cells(launch)["cli"][0] == "○"
    assert cells(mid)["core"][0] == "✓" and cells(mid)["parser"][0] == "●"
    assert all(sign == "✓" for sign, _, _ in cells(end).values())
    ends = {line.split()[0]: line for line in out["points"][2]["timeline"][4::2]}
    assert all(re.search(r"M\s+done$", line) for line in ends.values()), ends
    assert out["opened"] == str(repo.parent / "calc.flowd" / "calc" / "parser")
