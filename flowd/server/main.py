"""`flowd serve`: the language server over stdio, or TCP on the loopback interface."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from flowd.base.errors import InputError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _logging() -> None:
    # stdout is the protocol channel: every log line goes to stderr.
    level = os.environ.get("FLOWD_LOG", "WARNING").upper()
    logging.basicConfig(
        stream=sys.stderr, level=level, format="flowd serve %(levelname)s %(name)s: %(message)s"
    )
    # pygls logs every message body at INFO; keep it quiet unless asked.
    for noisy in ("pygls", "watchfiles"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def serve_command(args: argparse.Namespace) -> int:
    tcp = bool(getattr(args, "tcp", False))
    host = str(getattr(args, "host", "127.0.0.1") or "127.0.0.1")
    port = int(getattr(args, "port", 2087))
    if tcp and host not in LOOPBACK:
        raise InputError(
            f"--host {host}: flowd serve listens on the loopback interface only (127.0.0.1); "
            "it controls agents that change your repository, so it is never exposed to the network"
        )
    _logging()
    from flowd.server.setup import build_server

    server = build_server()
    try:
        if tcp:
            from flowd.server.tcp import serve_tcp

            # Token-gated (docs/protocol.md); says "Serving on (host, port)" on stderr once it listens.
            serve_tcp(server, "::1" if host == "::1" else "127.0.0.1", port)
        else:
            server.start_io()
    finally:
        server.stop()
    return 0
