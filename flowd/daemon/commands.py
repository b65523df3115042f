"""`flowd daemon status [--json]`, `flowd daemon stop` and `flowd web` (docs/editors.md, "One daemon per repository")."""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from flowd.base.errors import FlowdError, InputError
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


def web_command(args: argparse.Namespace) -> int:
    """`flowd web`: the daemon serves its page (started if need be); the URL is the last line."""
    root = repository()
    try:
        conn, replaced = client.open_session(root, "web", port=args.port)
    except client.DaemonUnavailable as exc:
        raise FlowdError(str(exc), exit_code=1) from None
    conn.close()
    if replaced:
        print(replaced)
    url = str(conn.answer["url"])
    print(
        f"flowd web: the live page of {root} (daemon pid {conn.answer.get('pid')}); keep the URL to yourself"
    )
    if not args.no_open:
        import webbrowser

        with contextlib.suppress(Exception):
            webbrowser.open(url)
    print(url)
    return 0
