"""The real Mermaid parser and a real browser for the report's pictures (docs/graph.md).

Mermaid comes from npm into a cache outside the repository (`~/.cache/flowd-test/mermaid`,
installed once); chromium is the one the editor end-to-end test uses. Neither is skipped when
missing: the test fails saying how to get it, since CI has both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flowd-test" / "mermaid"
PACKAGES = ("mermaid@11", "jsdom@25")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def mermaid_dir() -> Path:
    """The cache with mermaid and jsdom installed (npm install on first use)."""
    if not (CACHE / "node_modules" / "mermaid").is_dir() or not (CACHE / "node_modules" / "jsdom").is_dir():
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            pytest.fail("the Mermaid check needs node and npm (to install mermaid into ~/.cache/flowd-test)")
        CACHE.mkdir(parents=True, exist_ok=True)
        if not (CACHE / "package.json").exists():
            (CACHE / "package.json").write_text('{"name": "flowd-mermaid-check", "private": true}\n')
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", *PACKAGES], cwd=CACHE, capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.fail(f"npm install {' '.join(PACKAGES)} failed in {CACHE}: {done.stderr[-2000:]}")
    shutil.copyfile(HERE / "mermaid_check.mjs", CACHE / "mermaid_check.mjs")
    return CACHE


def parse_mermaid(texts: list[str]) -> list[dict[str, Any]]:
    where = mermaid_dir()
    done = subprocess.run(
        ["node", "mermaid_check.mjs"], cwd=where, input=json.dumps(texts), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def open_in_chromium(page: Path, profile: Path) -> tuple[str, list[str]]:
    """(the DOM chromium built, the console messages it logged) for `page`, headless."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no chromium at {CHROMIUM}: run editors/vscode/scripts/e2e-install.sh (or set CHROMIUM)")
    done = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console
