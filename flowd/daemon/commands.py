"""`flowd daemon status [--json]` and `flowd daemon stop` (docs/editors.md, "One daemon per repository")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flowd.base.errors import InputError
from flowd.daemon import client
from flowd.daemon.forward import main_checkout

FIELDS = ("pid", "version", "repo", "sessions", "runs")


def repository() -> Path:
    root = main_checkout(Path.cwd())
    if root is None:
        raise InputError(f"{Path.cwd()} is not in a git repository with a main checkout; run this inside one")
    return root


def status_command(args: argparse.Namespace) -> int:
    root = repository()
    conn = client.hello(root, "status")
    if conn is None:
        if args.json:
            print(json.dumps({"error": f"no flowd daemon runs for {root}"}))
        else:
            print(f"No flowd daemon runs for {root}.")
        return 1
    conn.close()
    status: dict[str, Any] = {key: conn.answer.get(key) for key in FIELDS}
    web = conn.answer.get("web")
    if isinstance(web, dict) and web.get("url"):
        status["web"] = {"url": web["url"]}
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"flowd daemon {status['version']} (pid {status['pid']}) for {status['repo']}")
    print(f"{status['sessions']} session(s), {status['runs']} run(s) followed")
    if "web" in status:
        print(f"page: {status['web']['url']}")
    return 0


def stop_command(args: argparse.Namespace) -> int:
    root = repository()
    if client.stop(root, "the daemon was stopped (flowd daemon stop); runs go on"):
        print(f"Stopped the flowd daemon for {root}.")
    else:
        print(f"No flowd daemon runs for {root}.")
    return 0
