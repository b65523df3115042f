"""`python -m tests.model_stub [--log FILE]`: run the model stub by hand until Ctrl-C.

Prints the base URL, then the environment that points each agent at it (docs/roster.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tests.model_stub.server import ModelStub


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.model_stub")
    parser.add_argument("--log", type=Path, help="append one JSON line per request to this file")
    args = parser.parse_args()
    with ModelStub(log_path=args.log) as stub:
        print(f"model stub on {stub.url}", flush=True)
        print(f"  ANTHROPIC_BASE_URL={stub.url}", flush=True)
        print(f"  GOOGLE_GEMINI_BASE_URL={stub.url}", flush=True)
        print(
            f'  codex: [model_providers.stub] base_url = "{stub.url}/v1"  wire_api = "responses"', flush=True
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
