"""The command line the protocol's generators share: `python -m flowd.protocol.<lang> [--check]
PATH` writes PATH from `flowd schema protocol` (atomically, only when it changed) or, with
`--check`, exits 1 when the committed file has drifted and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# How to regenerate every generated client file (docs/protocol.md).
REGENERATE = "node editors/vscode/scripts/protocol.mjs"


def main(render: Callable[[dict[str, Any]], str], what: str, argv: list[str] | None = None) -> int:
    from flowd.schema.json_schema import protocol_schema

    parser = argparse.ArgumentParser(description=f"write or check {what}")
    parser.add_argument("path", type=Path, help=f"{what} to write or check")
    parser.add_argument("--check", action="store_true", help="exit 1 if PATH differs; write nothing")
    args = parser.parse_args(argv)
    text = render(protocol_schema())
    before = args.path.read_text(encoding="utf-8") if args.path.is_file() else ""
    if before == text:
        print(f"protocol: {args.path} is up to date")
        return 0
    if args.check:
        print(
            f"protocol: {args.path} differs from `flowd schema protocol`; run {REGENERATE}", file=sys.stderr
        )
        return 1
    tmp = args.path.with_name(args.path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.path)
    print(f"protocol: wrote {args.path} from `flowd schema protocol`")
    return 0
