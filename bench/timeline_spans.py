"""A long run's timeline: spans and memory of the view of a generated 1 M-event trace.

The trace is `bench/reattach.py`'s live run (20 lanes, 12 merged, 8 active; gates every few
coder turns, so each lane goes coding → gated → coding thousands of times). Each fold runs in a
fresh subprocess, streaming the whole trace into a `RunView` the way a reader without a
checkpoint does (`TraceFollower.fold_into`), and prints the view's timeline spans, the bytes of
the `flow/timeline` answer, the view checkpoint's bytes, CPU seconds and peak RSS (VmHWM):

- before: every span kept (`flowd.trace.timeline.COLUMNS = 0`, the fold as it was);
- after: spans no picture can show apart merged (`COLUMNS` as shipped, docs/graph.md).

Both in the same run, on the same trace; the ratios after/before are printed last.

    .venv/bin/python bench/timeline_spans.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reattach import RUN_ID, generate

_FOLD = """
import json, resource, sys, time
from pathlib import Path
from flowd.trace import timeline
if sys.argv[2] == "before":
    timeline.COLUMNS = 0
from flowd.engine.epicgraph import timeline_wire
from flowd.trace.checkpoint import capture
from flowd.trace.log import TraceFollower
from flowd.trace.view import RunView
t0 = time.process_time()
view = RunView(run_id=sys.argv[3])
TraceFollower(Path(sys.argv[1])).fold_into(view, to_end=True)
cpu = time.process_time() - t0
spans = sum(len(lane.phases) for lane in view.lanes.values())
wire = len(json.dumps(timeline_wire(view)))
status = Path("/proc/self/status").read_text()
hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
print(json.dumps({"spans": spans, "wire": wire, "checkpoint": len(capture(view, 1, b"x\\n") or b""), "cpu": cpu, "rss": hwm / 1024}))
"""


def fold(trace: Path, mode: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _FOLD, str(trace), mode, RUN_ID], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the fold ({mode}) failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowd-spans-") as tmp:
        trace = Path(tmp) / "trace.jsonl"
        t0 = time.perf_counter()
        count = generate(trace, args.events)
        print(
            f"trace: {count} events, {trace.stat().st_size / 1e6:.0f} MB ({time.perf_counter() - t0:.0f} s)"
        )
        results = {mode: fold(trace, mode) for mode in ("before", "after")}
    print(f"{'':8} {'spans':>8} {'timeline B':>11} {'checkpoint B':>13} {'CPU s':>7} {'peak RSS MB':>12}")
    for mode, r in results.items():
        print(
            f"{mode:8} {r['spans']:>8.0f} {r['wire']:>11.0f} {r['checkpoint']:>13.0f} "
            f"{r['cpu']:>7.2f} {r['rss']:>12.1f}"
        )
    before, after = results["before"], results["after"]
    ratios = {key: after[key] / before[key] for key in ("spans", "wire", "checkpoint", "cpu", "rss")}
    print("after/before: " + ", ".join(f"{key} {value:.3f}" for key, value in ratios.items()))


if __name__ == "__main__":
    main()
