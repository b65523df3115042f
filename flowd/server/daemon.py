"""The repository's daemon: every editor session, the CLI's requests, one fold of each run.

Started by a forwarder (`flowd serve`, flowd/daemon/forward.py) as `python -m flowd.server.daemon
ROOT`, detached. It listens on an abstract unix socket named in its info file (flowd/daemon/place.py)
and refuses a peer of another user or one running with `no_new_privs` (as every confined lane
does). Each `lsp` connection is one `FlowServer` session sharing the `Hub`; a session whose client
stops reading loses notifications past a bound and gets a fresh snapshot once it drains, never an
unbounded backlog. It exits after `[daemon] idleExitS` with no session and no run going on, on
`flowd daemon stop`, or when a newer flowd replaces it; sessions are told, runs go on
(docs/editors.md, "One daemon per repository").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flowd.base.errors import FlowdError
from flowd.daemon import place
from flowd.server.hub import Hub
from flowd.server.sessions import SessionWriter

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 10.0
IDLE_CHECK_S = 1.0


def no_new_privs(pid: int) -> bool:
    """Whether process `pid` runs with `no_new_privs` (every Landlock-confined lane does)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NoNewPrivs:"):
                    return line.split()[1] != "0"
    except OSError:
        return True  # a peer we cannot look at is not trusted
    return False


def refusal(sock: socket.socket | None) -> str | None:
    """Why a connecting peer is refused (None: it is the user, outside any lane)."""
    if sock is None:
        return "flowd daemon: no peer credentials"
    pid, uid, _gid = place.peer(sock)
    if uid != os.getuid():
        return f"flowd daemon: uid {uid} is not this daemon's user"
    if no_new_privs(pid):
        return "flowd daemon: a process running with no_new_privs (as flowd's confined lanes do) is refused"
    return None


class Daemon:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.hub = Hub(root)
        self.name = f"flowd/{os.getuid()}/{place.key_of(root)}/{secrets.token_hex(8)}"
        self.sessions: dict[Any, Any] = {}  # FlowServer -> its SessionWriter
        self.stopping = asyncio.Event()
        self.stop_reason = ""
        self.idle_since = time.monotonic()
        self.idle_exit_s = _idle_exit_s(root)
        self.started = time.time()
        self.web: dict[str, Any] | None = None
        self.page: Any = None  # the live page (flowd/server/web.py), once `flowd web` asked for it
        self.pages = 0  # pages connected
        self.requests: dict[str, int] = {}  # the CLI's requests answered, by method

    def info(self) -> dict[str, Any]:
        info = {
            "pid": os.getpid(),
            "version": place.version(),
            "repo": str(self.root),
            "socket": self.name,
            "sessions": len(self.sessions),
            "runs": sum(1 for run in self.hub.live()),
            "requests": self.requests,
            "pages": self.pages,
        }
        if self.web is not None:
            info["web"] = self.web
        return info

    async def serve(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind("\0" + self.name)
        listener = await asyncio.start_unix_server(self._connection, sock=sock, limit=1 << 20)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop, "the daemon was stopped (a signal)")
        hub_start = asyncio.ensure_future(self.hub.start())
        place.write_info(self.root, self.info())
        log.warning("flowd daemon %s serving %s (pid %d)", place.version(), self.root, os.getpid())
        idle = asyncio.ensure_future(self._idle())
        try:
            await self.stopping.wait()
        finally:
            idle.cancel()
            listener.close()
            if self.page is not None:
                self.page.stop()
            place.remove_info(self.root, os.getpid())
            for server in list(self.sessions):
                self._tell(server, "stopped" if "replaced" not in self.stop_reason else "replaced")
            await asyncio.sleep(0.05)
            for server, writer in list(self.sessions.items()):
                writer.close()
                server.stop()
            hub_start.cancel()
            self.hub.stop()

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.stopping.set()

    def _tell(self, server: Any, state: str) -> None:
        with contextlib.suppress(Exception):
            server.protocol.notify("$/flowd/daemon", {"state": state, "message": self.stop_reason})

    async def _idle(self) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_S)
            if self.hub.busy() or self.sessions:
                self.idle_since = time.monotonic()
            elif time.monotonic() - self.idle_since >= self.idle_exit_s:
                self.stop(f"idle for {self.idle_exit_s:g} s")
                return

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        why = refusal(writer.get_extra_info("socket"))
        try:
            hello = (
                json.loads(await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S))
                if why is None
                else None
            )
        except (ValueError, RecursionError, TimeoutError, OSError):
            hello, why = None, "flowd daemon: no hello"
        if why is not None or not isinstance(hello, dict):
            log.warning("refused a connection: %s", why)
            await _answer(writer, {"error": why or "flowd daemon: a bad hello"})
            writer.close()
            return
        kind = hello.get("kind")
        answer = {"version": place.version(), "pid": os.getpid()}
        if kind == "status":
            await _answer(writer, {**answer, **self.info()})
        elif kind == "stop":
            await _answer(writer, answer)
            self.stop(str(hello.get("reason") or "flowd daemon stop"))
        elif kind == "lsp":
            await _answer(writer, answer)
            await self._session(reader, writer, hello)
        elif kind == "web":
            try:
                await _answer(writer, {**answer, **(await self._web(hello.get("port")))})
            except OSError as exc:
                await _answer(
                    writer, {"error": f"flowd web: the page could not listen on 127.0.0.1: {exc.strerror}"}
                )
        elif kind == "rpc":
            await _answer(writer, answer)
            await self._rpc(reader, writer)
        writer.close()

    def new_session(self, env: dict[str, str] | None) -> Any:
        from flowd.server.setup import build_server

        server = build_server(hub=self.hub, env=env)
        server._stop_event = threading.Event()
        return server

    def end_session(self, server: Any, writer: SessionWriter) -> None:
        self.sessions.pop(server, None)
        writer.close()
        server.stop()
        self.idle_since = time.monotonic()

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: dict[str, Any]
    ) -> None:
        from pygls.io_ import run_async

        env = hello.get("env")
        server = self.new_session(env if isinstance(env, dict) else None)
        session_writer = SessionWriter(writer, server.resync)
        server.protocol.set_writer(session_writer)
        self.sessions[server] = session_writer
        try:
            await run_async(
                stop_event=server._stop_event,
                reader=reader,
                protocol=server.protocol,
                logger=log,
                error_handler=server.report_server_error,
            )
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.end_session(server, session_writer)

    async def _web(self, port: Any) -> dict[str, Any]:
        """Serve the page (on `port`, or any free one), once; its URL and token go in the info file."""
        from flowd.server.web import Web

        if self.page is None:
            page = Web(self, secrets.token_urlsafe(32))
            await page.start(port if isinstance(port, int) else 0)
            self.page = page
            self.web = {"url": page.url(), "token": page.token, "port": page.port}
            place.write_info(self.root, self.info())
        return {"url": self.page.url()}

    async def _rpc(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from flowd.server.requests import answer_rpc

        while line := await reader.readline():
            try:
                message = json.loads(line)
                method = str(message.get("method"))
                self.requests[method] = self.requests.get(method, 0) + 1
                result = await answer_rpc(self.hub, message.get("method"), message.get("params") or {})
                reply: dict[str, Any] = {"id": message.get("id"), "result": result}
            except FlowdError as exc:
                reply = {"id": None, "error": {"flowd": True, "message": str(exc), "exitCode": exc.exit_code}}
            except Exception as exc:  # the daemon never dies of a request; the CLI does it itself
                log.exception("rpc failed")
                reply = {"id": None, "error": {"message": f"{type(exc).__name__}: {exc}"}}
            await _answer(writer, reply)


async def _answer(writer: asyncio.StreamWriter, value: dict[str, Any]) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        writer.write(json.dumps(value).encode() + b"\n")
        await writer.drain()


def _idle_exit_s(root: Path) -> float:
    from flowd.store.config import load_settings

    try:
        return float(load_settings(root).daemon.idle_exit_s)
    except (FlowdError, OSError) as exc:
        log.warning("idleExitS: %s; using 600", exc)
        return 600.0


def main(argv: list[str]) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("FLOWD_LOG", "WARNING").upper(),
        format="%(asctime)s flowd daemon %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("pygls", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    root = Path(argv[0]).resolve()
    daemon = None
    try:
        daemon = Daemon(root)
        # Not asyncio.run: its shutdown would wait for threads still blocked in a watch.
        asyncio.new_event_loop().run_until_complete(daemon.serve())
    except FlowdError as exc:
        print(f"flowd daemon: {exc}", file=sys.stderr)
        return 2
    log.warning("flowd daemon (pid %d) ends: %s", os.getpid(), daemon.stop_reason)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    # Threads still blocked on a watch or a session's pool must not keep a stopped daemon alive.
    os._exit(code)
