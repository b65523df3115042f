"""The live page in a real headless chromium (docs/editors.md, "The live page"): a real `flowd run`
waits with a finished story for approval; the page, opened from `flowd web`'s URL, shows the run
and the story asking, and its approve button merges the story."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flowd.events.model import StoryMerged, StoryPaused
from tests.daemon.chromium import CHROMIUM, Chromium
from tests.engine.scenario import Scenario, coder, story


def _until(what: str, ready: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_page_shows_a_paused_merge_and_its_approve_merges_it(tmp_path: Path) -> None:
    assert os.access(CHROMIUM, os.X_OK), "this test needs Debian's chromium (`make pytest` installs it)"
    sc = Scenario.create(tmp_path, [story("docs", ["docs.md"])], [coder("docs", {"docs.md": "# docs\n"})])
    run = sc.spawn("--pause-on", "merge")
    browser: Chromium | None = None
    try:
        run_id = ""

        def paused() -> bool:
            nonlocal run_id
            runs = sorted((sc.repo / ".flow" / "runs").glob("*/trace.jsonl"))
            run_id = runs[0].parent.name if runs else ""
            return bool(run_id) and any(isinstance(e.event, StoryPaused) for e in sc.events(run_id))

        _until("the story to ask for approval", paused)
        web = subprocess.run([sys.executable, "-m", "flowd", "web", "--no-open"], cwd=sc.repo,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert web.returncode == 0, web.stderr
        browser = Chromium()
        browser.open(web.stdout.splitlines()[-1])
        shown = browser
        _until("the page to show the paused story", lambda: "docs" in shown.text() and shown.click("approve"))
        browser.screenshot(tmp_path / "asking.png")
        assert (tmp_path / "asking.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert run.wait(timeout=120) == 0, run.stderr.read().decode() if run.stderr else ""
        assert [e.event.lane for e in sc.events(run_id) if isinstance(e.event, StoryMerged)] == ["docs"]
        _until("the page to show the run done", lambda: "done" in shown.text().lower(), timeout=30)
        browser.screenshot(tmp_path / "done.png")  # kept with a failing test's temp dir, to look at
    finally:
        if browser is not None:
            browser.close()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        subprocess.run([sys.executable, "-m", "flowd", "daemon", "stop"], cwd=sc.repo, capture_output=True,
                       timeout=60)  # fmt: skip
