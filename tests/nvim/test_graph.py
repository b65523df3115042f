"""`:FlowGraph` in headless Neovim 0.11 against a real server and run (docs/editors.md): the graph
buffer's layers, signs and critical marks match `flow/graph` at launch, mid-run and at the end,
the timeline buffer draws each lane, and <CR> opens a story's worktree (where the server says it
is: under a worktree root of the project's own)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nvim.conftest import drive
from tests.server.demo_repo import delay, kill_runs, sample

# The epic gate: green on every merge but parser's first (calc/parser.py without FIXED), which
# goes back to its coder as a merge revision; the coder's fix (FIX_RULE) makes it green.
EPIC_GATE = (
    """sh -c 'test "$(basename "$(pwd)")" != _epic || test ! -f calc/parser.py || grep -q FIXED calc/parser.py """
    """|| { echo "epic check: calc/parser.py not FIXED"; exit 1; }'"""
)
FIX_RULE = {
    "when": {"role": "coder", "story": "parser", "prompt": "epic check: calc/parser.py not FIXED"},
    "writes": {"calc/parser.py": "# FIXED\n"},
    "reply": "fixed",
    "delayMs": 3000,
}

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
        rules.insert(0, FIX_RULE)

    root, plan = sample(tmp_path / "calc", tune)
    config = root / ".flow" / "config.toml"
    # Story worktrees under a root of the project's own: <CR> must open where the server says.
    config.write_text(
        config.read_text().replace("gates = []", f"gates = {json.dumps([EPIC_GATE])}")
        + 'worktreeRoot = "../trees"\n'
    )
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
    assert [p["name"] for p in out["points"]] == ["launch", "mid-run", "red merge revised", "end"]
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
    launch, mid, red, end = (p["graph"] for p in out["points"])
    assert cells(launch)["core"][0] == "●" and cells(launch)["cli"][0] == "○"
    assert cells(mid)["core"][0] == "✓" and cells(mid)["parser"][0] == "●"
    # Back to coding after its merge: the timeline says queued (its merge), then coding again.
    assert cells(red)["parser"][0] == "●" and cells(red)["cli"][0] == "○"
    said = out["points"][2]["timeline"][
        out["points"][2]["timeline"].index(
            next(line for line in out["points"][2]["timeline"] if line.startswith("parser "))
        )
        + 1
    ]
    assert re.search(r"coding [\d:]+, (queued|merging) [\d:]+, .*coding [\d:]+$", said), said
    assert all(sign == "✓" for sign, _, _ in cells(end).values())
    ends = {line.split()[0]: line for line in out["points"][-1]["timeline"][4::2]}
    assert all(re.search(r"M\s+done$", line) for line in ends.values()), ends
    assert out["opened"] == str((repo.parent / "trees").resolve() / "calc" / "parser")
