"""The victim lane's process in the sealed escape campaign (tests/sandbox/test_escape_campaign.py):
it waits, while the attackers work, for the marks they leave when done (at most a minute; a mark
given as `<mark>|<story state file>` no longer once flowd says that story failed), and a signal
that reaches it leaves `b/signalled-<SIGNAME>` in its worktree (run as
`python3 victim_lane.py campaign-victim-lane <mark>...`; the first argument names it in its
command line, where an attacker finds it)."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGALRM, signal.SIGTERM)


def _hit(signum: int, _frame: FrameType | None) -> None:
    Path("b").mkdir(exist_ok=True)
    Path("b", f"signalled-{signal.Signals(signum).name}").write_text("hit\n", encoding="utf-8")


def _met(mark: str) -> bool:
    path, _, state = mark.partition("|")
    if Path(path).exists():
        return True
    try:
        return bool(state) and json.loads(Path(state).read_text(encoding="utf-8")).get("status") == "failed"
    except (OSError, ValueError):
        return False


def main(marks: list[str]) -> None:
    for signum in SIGNALS:
        signal.signal(signum, _hit)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_met(m) for m in marks):
        time.sleep(0.1)


if __name__ == "__main__":
    main(sys.argv[2:])
