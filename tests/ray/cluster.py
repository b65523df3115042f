"""A real Ray cluster on this machine for tests: a head and a worker node, each started with
`ray start` in its own session and temp dir, bound to and advertising 127.0.0.1 only.

Only what these nodes started is stopped (their sessions, by process group): never `ray stop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NODE = [sys.executable, str(Path(__file__).with_name("loopback_node.py"))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def driver_env(address: str) -> dict[str, str]:
    """What a driver process (the flowd runner) needs to join the loopback cluster."""
    return {
        **os.environ,
        "RAY_ADDRESS": address,
        # Ray's switch for single-machine clusters: a loopback address stays loopback.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _sessions_alive(sids: list[int]) -> list[int]:
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) in sids:
                    alive.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return alive


@dataclass
class Cluster:
    root: Path
    address: str = ""
    sids: list[int] = field(default_factory=list)
    nodes: dict[str, Path] = field(default_factory=dict)

    def start_node(self, name: str, *args: str) -> None:
        temp = self.root / name
        temp.mkdir(parents=True)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "FLOWD_LANE_CACHE": str(temp / "lanes")}
        env.pop("RAY_ADDRESS", None)
        process = subprocess.Popen(
            [*NODE, "start", "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp / "ray"),
             "--num-cpus", "2", "--disable-usage-stats", "--dashboard-agent-listen-port", str(free_port()),
             "--node-name", name, *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.sids.append(process.pid)
        self.nodes[name] = temp
        out, _ = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"ray start ({name}) failed:\n{out.decode(errors='replace')[-3000:]}")

    def node_pids(self, title: str) -> list[int]:
        """Processes of this cluster whose command line holds `title` (Ray names actors' processes)."""
        found = []
        for pid in _sessions_alive(self.sids):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if title in cmd:
                found.append(pid)
        return found

    def stop(self, keep_files: bool = False) -> None:
        for _ in range(3):
            for sid in self.sids:
                try:
                    os.killpg(sid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in _sessions_alive(self.sids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not _sessions_alive(self.sids):
                break
            time.sleep(0.5)
        if not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(attempts: int = 3) -> Cluster:
    """A head and a worker node; on a loaded machine a raylet may miss Ray's fixed 30 s start-up
    window, so the whole cluster is started again (after stopping what the failed try started)."""
    for attempt in range(1, attempts + 1):
        # Short paths: Ray's unix sockets live under the temp dir (108 bytes at most).
        cluster = Cluster(Path(tempfile.mkdtemp(prefix="fray", dir="/tmp")))
        try:
            port = free_port()
            cluster.start_node("head", "--head", "--port", str(port), "--include-dashboard=false")
            cluster.address = f"127.0.0.1:{port}"
            cluster.start_node("worker", "--address", cluster.address)
            return cluster
        except RuntimeError:
            cluster.stop()
            if attempt == attempts:
                raise
        except BaseException:
            cluster.stop()
            raise
    raise AssertionError("unreachable")
