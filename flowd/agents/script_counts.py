"""`times` bookkeeping of the scripted agent (docs/scripted-agent.md): prompts counted per run
across every process of the agent (clones, restarts, sessions), so the counts live in a small file
guarded by `fcntl.flock`: in `$FLOWD_SCRIPT_STATE` when set, else in a per-script directory under
the system temp dir keyed by the script's path and content."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

STATE_ENV = "FLOWD_SCRIPT_STATE"
_KEPT_RUNS = 50  # counts of older runs are dropped so the state file stays small


class RunCounts:
    """`times` bookkeeping shared by every process serving one script: {runId: {ruleIndex: n}}.

    One file per script (named by a hash of its path and content), read and rewritten under an
    exclusive `flock` on the file itself, so concurrent clones never lose a count.
    """

    def __init__(self, script_path: Path, script_text: bytes) -> None:
        configured = os.environ.get(STATE_ENV)
        if configured:
            base = Path(configured)
        else:
            import tempfile  # only without $FLOWD_SCRIPT_STATE: it is one of the slower imports

            base = Path(tempfile.gettempdir()) / "flowd-script-state"
        key = hashlib.sha256(str(script_path.resolve()).encode() + b"\0" + script_text).hexdigest()[:16]
        self.path = base / f"{script_path.name}-{key}.json"

    def take(self, run_id: str, choose: Any) -> int | None:
        """Under the lock: `choose(counts)` picks a rule index (or None), whose count then goes up."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        with open(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                handle.seek(0)
                data = _parse(handle.read())
                runs: dict[str, dict[str, int]] = data.setdefault("runs", {})
                counts = runs.get(run_id, {})
                index: int | None = choose({int(k): v for k, v in counts.items()})
                if index is not None:
                    counts[str(index)] = counts.get(str(index), 0) + 1
                    runs.pop(run_id, None)
                    runs[run_id] = counts  # most recent last, so trimming drops the oldest runs
                    while len(runs) > _KEPT_RUNS:
                        runs.pop(next(iter(runs)))
                    handle.seek(0)
                    handle.truncate()
                    handle.write(json.dumps(data))
                    handle.flush()
                return index
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _parse(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}  # a torn write (the machine died mid-write): counting starts afresh
    return data if isinstance(data, dict) else {}
