"""The Neovim plugin, end to end: launch, lanes buffer, statusline, diagnostics, cancel, resume."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.nvim.conftest import ROOT, drive
from tests.server.demo_repo import delay, kill_runs, sample
from tests.server.tcp_serve import serve_tcp


@pytest.fixture
def held_repo(tmp_path: Path) -> Iterator[Path]:
    """The demo with core's first coder turn held for 6 s, docs' last for 3 s."""

    def tune(rules: list[dict[str, Any]]) -> None:
        delay(rules, "coder", "core", 6000)
        delay(rules, "coder", "docs", 3000, last=True)

    root, _ = sample(tmp_path / "calc", tune)
    yield root
    kill_runs(root)


def test_the_plugin_end_to_end(nvim: Path, held_repo: Path, tmp_path: Path) -> None:
    out = drive(
        nvim,
        "plugin_e2e.lua",
        tmp_path,
        {
            "REPO": str(held_repo),
            "PLAN": str(held_repo / "calc.epic.json"),
            "WORKTREES": str(held_repo.parent / "calc.flowd"),
        },
    )
    assert out["root_dir"] == str(held_repo)
    assert out["statusline_idle"] == ""
    assert out["lanes_filetype"] == "flowlanes"
    header = out["lanes_running"][0]
    assert header.startswith(f"calc  {out['run_id']}  running  ")
    lanes = {line.split()[0]: line for line in out["lanes_running"][1:]}
    assert set(lanes) == {"core", "parser", "format", "cli", "docs"}
    assert re.match(r"^  core\s+active\s+demo#\d+\s", lanes["core"])
    assert re.fullmatch(r"⟳ [0-4]/5 lanes( · \$\d+\.\d\d)?", out["statusline_running"])

    assert out["diagnostic"] == {
        "message": "story 'core' changed NOTES.txt, outside its perimeter",
        "severity": 1,
        "source": "flowd",
    }
    # One client for the repository: the worktree's buffer went to the main checkout's server.
    assert out["clients"] == 1 and out["worktree_client_root"] == str(held_repo)

    assert out["statusline_cancelled"] == ""
    assert out["resumed_id"] != out["run_id"]
    assert out["lanes_done"][0].startswith(f"calc  {out['resumed_id']}  done  5/5 done")
    assert all(re.match(r"^  \S+\s+done\s", line) for line in out["lanes_done"][1:])
    assert out["statusline_done"] == ""
    assert out["status"].startswith(f"flowd: {out['resumed_id']} calc done")
    assert out["cost"].startswith("flowd: flowd cost")
    assert out["answer"] == "flowd: nothing waits for an answer"
    assert out["progress_echoes"], "the run's progress was never echoed"


def _snippet() -> str:
    """The plain vim.lsp snippet of docs/editors.md, exactly as printed there."""
    text = (ROOT / "docs" / "editors.md").read_text()
    section = text[text.index("### Plain `vim.lsp`") :]
    return section[section.index("```lua\n") + len("```lua\n") : section.index("\n```\n")] + "\n"


def test_the_docs_snippet_works_verbatim(nvim: Path, held_repo: Path, tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.lua"
    snippet.write_text(_snippet())
    out = drive(
        nvim,
        "snippet.lua",
        tmp_path,
        {
            "REPO": str(held_repo),
            "PLAN": str(held_repo / "calc.epic.json"),
            "WORKTREES": str(held_repo.parent / "calc.flowd"),
            "SNIPPET": str(snippet),
            # The snippet runs `flowd serve` from PATH, as a user's set-up would.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
    )
    assert out["root_dir"] == str(held_repo)
    assert 'epicBranch = "epic/calc"' in out["launched"]
    assert out["clients"] == 1
    assert out["status"].splitlines()[0].endswith(" calc done")
    assert out["cost"].startswith("flowd cost\n")


def test_the_plugin_connects_over_tcp_with_the_token(nvim: Path, tmp_path: Path) -> None:
    repo, _ = sample(tmp_path / "calc")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    server, bound, _ = serve_tcp(repo, env)
    port = str(bound)
    try:
        out = drive(
            nvim, "tcp.lua", tmp_path, {"REPO": str(repo), "PORT": port, "XDG_RUNTIME_DIR": str(runtime)}
        )
        assert out["root_dir"] == str(repo)
        assert out["status"] == "flowd: no runs"
        assert out["cancel_error"]["level"] == 4  # vim.log.levels.ERROR
        assert out["cancel_error"]["msg"].startswith("flowd: flow.cancelEpic: runId: ")
        assert "\n" not in out["cancel_error"]["msg"]
        assert out["validate_error"] == {
            "level": 4,
            "msg": f"flowd: flow.validatePlan: plan: no such plan file {repo / 'gone.epic.json'}; "
            "check the path (it may have moved)",
        }
        assert server.wait(timeout=30) == 0  # Neovim's shutdown/exit ended the one session
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
