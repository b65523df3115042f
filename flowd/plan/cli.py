"""`flowd plan validate PLAN [--json]`: every violation, one per line, like a compiler.

Exit 0 when valid, 2 when invalid or unreadable (contract §5).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flowd.errors import EXIT_BAD_INPUT, EXIT_OK, InputError
from flowd.plan.graph import waves
from flowd.plan.parse import check_text, is_markdown, read_plan_text


def validate_command(args: argparse.Namespace) -> int:
    shown: str = args.plan
    path = Path(shown)
    text = read_plan_text(path)  # an unreadable file is an InputError: one sentence on stderr, exit 2
    plan, found = check_text(text, markdown=is_markdown(path, text))
    if args.json:
        document = {"plan": shown, "valid": not found, "violations": [v.wire() for v in found]}
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return EXIT_OK if not found else EXIT_BAD_INPUT
    for v in found:
        print(f"{shown}:{v.located()}" if v.line is not None else f"{shown}: {v.message}")
    if found:
        noun = "violation" if len(found) == 1 else "violations"
        print(f"{shown}: invalid, {len(found)} {noun}")
        return EXIT_BAD_INPUT
    if plan is None:  # check_text always explains a missing plan; keep mypy and readers sure
        raise InputError(f"{shown}: the plan did not decode")
    n_waves = len(waves(plan))
    print(
        f"{shown}: valid, {len(plan.stories)} {'story' if len(plan.stories) == 1 else 'stories'} "
        f"in {n_waves} {'wave' if n_waves == 1 else 'waves'}"
    )
    return EXIT_OK
