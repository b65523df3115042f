"""Protocol fuzzing: seeded streams of malformed and hostile JSON-RPC against a real `flowd serve`.

Run: .venv/bin/python bench/fuzz_lsp.py [--batches 40] [--per-batch 25] [--seed 11]

The server runs as a subprocess over stdio in a temp git repository. Each batch sends a seeded mix
of: bad Content-Length framing, bodies that are not JSON (or not objects), wrong types, unknown
methods, huge and deeply nested params, path-traversal URIs and plan arguments to `flow/perimeter`
and the `flow.*` commands. After each batch a valid `flow/status` must still be answered. A
request with an id and a known shape must get a response: unknown methods -32601, bad params
-32602 (docs/protocol.md). At the end, `shutdown`, then requests (answered with an error: -32600, as the
LSP says after shutdown), then `exit`: the server must end with code 0, and no run may have been
launched and no file written outside the repository.

Prints messages tried, requests answered, status checks passed, and whether the server stayed alive.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLOWD = [sys.executable, "-m", "flowd"]


def frame(body: bytes) -> bytes:
    return b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def message(obj: Any) -> bytes:
    return frame(json.dumps(obj).encode())


class Server:
    """`flowd serve` over stdio; its stdout parsed into messages on a thread."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [*FLOWD, "serve"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.process.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.inbox.put(None)
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if length is None:
                continue
            body = out.read(length)
            try:
                self.inbox.put(json.loads(body))
            except ValueError:
                self.inbox.put({"unparseable": body[:200].decode("latin-1")})

    def send(self, data: bytes) -> bool:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def wait_for(self, ident: Any, timeout: float, seen: dict[Any, dict[str, Any]]) -> dict[str, Any] | None:
        """The response to request `ident` (other messages are filed in `seen`)."""
        deadline = time.monotonic() + timeout
        while ident not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                item = self.inbox.get(timeout=left)
            except queue.Empty:
                return None
            if item is None:
                return None
            if "id" in item and ("result" in item or "error" in item):
                key = item["id"]
                seen[key if isinstance(key, str | int) else json.dumps(key)] = item
        return seen[ident]

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=30)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


# -- hostile messages -------------------------------------------------------------------------

TRAVERSALS = [
    "../../../../etc/passwd",
    "/etc/passwd",
    "file:///etc/shadow",
    "file:///../../etc/passwd",
    "file://remote-host/share/x.epic.json",
    "..\\..\\windows\\system32",
    "%2e%2e/%2e%2e/etc/passwd",
    "plan.epic.json\x00.txt",
    "~/.ssh/id_rsa",
    "",
]


@dataclass
class Expect:
    """What a message may be answered with: an error code, any response, or nothing."""

    ident: Any = None
    codes: frozenset[int] | None = None  # an error with one of these codes
    any_answer: bool = False


def hostile(rng: random.Random, next_id: int) -> tuple[str, bytes, Expect]:
    """One seeded hostile message: (kind, bytes, expectation)."""
    kind = rng.choice(
        [
            "framing",
            "not json",
            "wrong types",
            "unknown method",
            "huge",
            "nested",
            "traversal",
            "notification",
        ]
    )
    rid = next_id
    if kind == "framing":
        data = rng.choice(
            [
                b"Content-Length: abc\r\n\r\n",
                b"Content-Length: -5\r\n\r\n",
                b"X-Nonsense: 1\r\n\r\n",
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                b"Content-Length: 4\r\n\r\nnull",
                b"Content-Length: 0\r\n\r\n",
                b"\r\n\r\n",
            ]
        )
        return kind, data, Expect()
    if kind == "not json":
        body = rng.choice([b"{", b"[1, 2", b"\xff\xfe\xfd", b"42", b'"str"', b"[]", b"[{}, {}]", b"{'a': 1}"])
        return kind, frame(body), Expect()
    if kind == "wrong types":
        obj = rng.choice(
            [
                {"jsonrpc": "2.0", "id": rid, "method": "flow/status", "params": [1, 2]},
                {"jsonrpc": "2.0", "id": rid, "method": "flow/perimeter", "params": {"uri": 5}},
                {"jsonrpc": "2.0", "id": rid, "method": "flow/costReport", "params": {"since": {"a": 1}}},
                {"jsonrpc": "2.0", "id": rid, "method": "flow/costReport", "params": {"timeZone": "Mars/Base"}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.launchEpic", "arguments": [{"plan": 7}]}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.cancelEpic", "arguments": ["not an object"]}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.resumeEpic", "arguments": [{}]}},
            ]
        )  # fmt: skip
        return kind, message(obj), Expect(rid, frozenset({-32602, -32600}))
    if kind == "unknown method":
        method = rng.choice(["flow/nope", "foo/bar", "flow/status/../x", "textDocument/unknownThing"])
        obj = {"jsonrpc": "2.0", "id": rid, "method": method, "params": {}}
        return kind, message(obj), Expect(rid, frozenset({-32601}))
    if kind == "huge":
        blob = "A" * rng.choice([1 << 20, 4 << 20])
        obj = rng.choice(
            [
                {"jsonrpc": "2.0", "id": rid, "method": "flow/perimeter", "params": {"uri": "file:///" + blob}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.validatePlan", "arguments": [{"plan": blob}]}},
                {"jsonrpc": "2.0", "id": rid, "method": "flow/status", "params": {"x": blob}},
            ]
        )  # fmt: skip
        return kind, message(obj), Expect(rid, any_answer=True)
    if kind == "nested":
        depth = rng.choice([1000, 10_000, 100_000])
        body = (
            b'{"jsonrpc": "2.0", "id": ' + str(rid).encode() + b', "method": "flow/status", "params": {"x": '
            + b"[" * depth + b"]" * depth + b"}}"
        )  # fmt: skip
        return kind, frame(body), Expect()
    if kind == "traversal":
        target = rng.choice(TRAVERSALS)
        obj = rng.choice(
            [
                {"jsonrpc": "2.0", "id": rid, "method": "flow/perimeter", "params": {"uri": target}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.validatePlan", "arguments": [{"plan": target}]}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.launchEpic", "arguments": [{"plan": target}]}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.resumeEpic", "arguments": [{"plan": target}]}},
                {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
                 "params": {"command": "flow.cancelEpic", "arguments": [{"runId": "../../" + target}]}},
            ]
        )  # fmt: skip
        return kind, message(obj), Expect(rid, any_answer=True)
    obj = rng.choice(
        [
            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": {"nested": True}}},
            {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 5}},
            {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": None},
            {"jsonrpc": "2.0", "method": "flow/unknownNotification", "params": {}},
            {"jsonrpc": "1.0", "id": rid, "method": "flow/status"},
            {"id": rid, "method": 12},
            {"jsonrpc": "2.0", "id": {"obj": 1}, "method": "flow/status", "params": {}},
            {"jsonrpc": "2.0", "id": rid, "result": {"unsolicited": True}},
        ]
    )
    return "notification or odd envelope", message(obj), Expect()


# -- the campaign -----------------------------------------------------------------------------


@dataclass
class Report:
    messages: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    requests_expected: int = 0
    requests_answered: int = 0
    wrong_answers: list[str] = field(default_factory=list)
    status_checks: int = 0
    status_answered: int = 0
    alive: bool = True
    after_shutdown: str = ""
    exit_code: int | None = None
    runs_launched: int = 0
    escaped_files: list[str] = field(default_factory=list)
    seconds: float = 0.0


def workspace(root: Path) -> Path:
    repo = root / "ws"
    repo.mkdir(parents=True)
    (repo / "README.md").write_text("# ws\n", encoding="utf-8")
    plan = {"epicId": "fz", "epic": "fuzz", "stories": [{"id": "a", "title": "A", "owned": ["a.txt"]}]}
    (repo / "fz.epic.json").write_text(json.dumps(plan), encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=f", "-c", "user.email=f@f", "commit", "-qm", "init"]):  # fmt: skip
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def fuzz(root: Path, *, batches: int, per_batch: int, seed: int) -> Report:
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    repo = workspace(root)
    before = {p.name for p in root.iterdir()}
    env = {**os.environ, "FLOWD_SCRIPT_STATE": str(root / "script-state")}
    server = Server(repo, env)
    seen: dict[Any, dict[str, Any]] = {}
    next_id = 1
    try:
        server.send(message({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                             "params": {"processId": None, "rootUri": repo.as_uri(), "capabilities": {}}}))  # fmt: skip
        if server.wait_for(0, 60, seen) is None:
            report.alive = False
            return report
        server.send(message({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        for _ in range(batches):
            expectations: list[tuple[str, Expect]] = []
            for _ in range(per_batch):
                next_id += 1
                kind, data, expect = hostile(rng, next_id)
                report.messages += 1
                report.by_kind[kind] = report.by_kind.get(kind, 0) + 1
                if not server.send(data):
                    report.alive = False
                    break
                expectations.append((kind, expect))
            next_id += 1
            status_id = f"status-{next_id}"
            # A server that lost the framing would take this for the tail of a bad message: a
            # blank line first lets a reader that resyncs on headers find the next one.
            server.send(message({"jsonrpc": "2.0", "id": status_id, "method": "flow/status", "params": {}}))
            report.status_checks += 1
            answer = server.wait_for(status_id, 30, seen)
            if answer is not None and "runs" in (answer.get("result") or {}):
                report.status_answered += 1
            for kind, expect in expectations:
                if expect.ident is None:
                    continue
                report.requests_expected += 1
                got = server.wait_for(expect.ident, 5, seen)
                if got is None:
                    report.wrong_answers.append(f"{kind} #{expect.ident}: no answer")
                    continue
                report.requests_answered += 1
                code = (got.get("error") or {}).get("code")
                if expect.codes is not None and code not in expect.codes:
                    report.wrong_answers.append(f"{kind} #{expect.ident}: {json.dumps(got)[:300]}")
            if server.process.poll() is not None:
                report.alive = False
                break
        # Shutdown, then a request (an error per the LSP), then exit (code 0 after shutdown).
        next_id += 1
        server.send(message({"jsonrpc": "2.0", "id": next_id, "method": "shutdown"}))
        server.wait_for(next_id, 30, seen)
        next_id += 1
        server.send(message({"jsonrpc": "2.0", "id": next_id, "method": "flow/status", "params": {}}))
        late = server.wait_for(next_id, 10, seen)
        report.after_shutdown = json.dumps(late)[:200] if late is not None else "no answer"
        server.send(message({"jsonrpc": "2.0", "method": "exit"}))
        try:
            report.exit_code = server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            report.exit_code = None
    finally:
        server.stop()
    runs = repo / ".flow" / "runs"
    report.runs_launched = len(list(runs.iterdir())) if runs.is_dir() else 0
    report.escaped_files = sorted({p.name for p in root.iterdir()} - before - {"script-state"})
    report.seconds = time.monotonic() - started
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--per-batch", type=int, default=25)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="flowd-fuzz-"))
    try:
        report = fuzz(tmp, batches=args.batches, per_batch=args.per_batch, seed=args.seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"messages tried: {report.messages} in {report.status_checks} batches, seed {args.seed}, {report.seconds:.1f}s"
    )
    print("  by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items())))
    print(
        f"requests answered as the spec says: {report.requests_answered - len([w for w in report.wrong_answers if 'no answer' not in w])}/{report.requests_expected}"
    )
    print(f"flow/status answered after each batch: {report.status_answered}/{report.status_checks}")
    print(f"server alive throughout: {'yes' if report.alive else 'NO'}")
    print(f"request after shutdown: {report.after_shutdown}")
    print(f"exit code after shutdown + exit: {report.exit_code}")
    print(
        f"runs launched by hostile commands: {report.runs_launched}; files outside the workspace: {report.escaped_files}"
    )
    for wrong in report.wrong_answers[:20]:
        print(f"WRONG {wrong}")
    ok = (
        report.alive
        and report.status_answered == report.status_checks
        and not report.wrong_answers
        and report.exit_code == 0
        and report.runs_launched == 0
        and not report.escaped_files
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
