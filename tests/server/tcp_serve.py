"""Starting `flowd serve --tcp` for a test: one place that knows how the server says it listens."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LISTENING = re.compile(r"Serving on \('127\.0\.0\.1', (\d+)\); token in (\S+)")


def serve_tcp(cwd: Path, env: dict[str, str], port: int = 0) -> tuple[subprocess.Popen[str], int, Path]:
    """The server, the port it listens on and its token file, once its stderr says so.

    The caller stops it (its own session, so a kill takes nothing else)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "flowd", "serve", "--tcp", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert server.stderr is not None
    for line in server.stderr:
        found = LISTENING.search(line)
        if found:
            return server, int(found.group(1)), Path(found.group(2))
    server.wait()
    raise AssertionError("flowd serve --tcp exited before it listened")
