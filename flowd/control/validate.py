"""`flowd plan validate PLAN [--json]`: every violation, one per line, like a compiler.

Exit 0 when valid, 2 when invalid or unreadable (docs/running.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flowd.base.errors import EXIT_BAD_INPUT, EXIT_OK, InputError
from flowd.plan.graph import waves
from flowd.plan.parse import check_text, describe, is_markdown, read_plan_text, verdict
from flowd.plan.violation import Violation


def validate_command(args: argparse.Namespace) -> int:
    shown: str = args.plan
    path = Path(shown)
    try:
        text = read_plan_text(path)
    except InputError as exc:
        if not args.json:
            raise  # one sentence on stderr, exit 2
        # --json promises a document on stdout, for an unreadable file too (the sentence on stderr).
        unreadable = Violation(code="plan.unreadable", message=exc.message)
        _print_json(shown, [unreadable])
        print(f"flowd: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    plan, found = check_text(text, markdown=is_markdown(path, text))
    if args.json:
        _print_json(shown, found)
        return EXIT_OK if not found else EXIT_BAD_INPUT
    for v in found:
        print(describe(shown, v))
    if found:
        print(verdict(shown, len(found)))
        return EXIT_BAD_INPUT
    if plan is None:  # check_text always explains a missing plan; keep mypy and readers sure
        raise InputError(f"{shown}: the plan did not decode")
    n_waves = len(waves(plan))
    print(
        f"{shown}: valid, {len(plan.stories)} {'story' if len(plan.stories) == 1 else 'stories'} "
        f"in {n_waves} {'wave' if n_waves == 1 else 'waves'}"
    )
    return EXIT_OK


def _print_json(shown: str, found: list[Violation]) -> None:
    document = {"plan": shown, "valid": not found, "violations": [v.wire() for v in found]}
    print(json.dumps(document, indent=2, ensure_ascii=False))
