"""Screenshot flowd's live page in a real headless chromium, after its WebSocket has filled it.

    python bench/page_screenshot.py URL OUT.png [--click TEXT] [--wait S]

Not a benchmark: a tool to look at the page (docs/editors.md, "The live page"). It starts
`/usr/bin/chromium --headless` with a DevTools port (tests/daemon/chromium.py), opens URL, waits,
optionally clicks the first button whose text is TEXT (say `approve`), and writes a PNG. Chromium
is stopped at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon.chromium import Chromium


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--click", default=None)
    parser.add_argument("--wait", type=float, default=3.0)
    args = parser.parse_args()
    browser = Chromium()
    try:
        browser.open(args.url)
        time.sleep(args.wait)
        if args.click:
            print("click:", "clicked" if browser.click(args.click) else "no such button")
            time.sleep(args.wait)
        browser.screenshot(Path(args.out))
        print(f"wrote {args.out}")
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
