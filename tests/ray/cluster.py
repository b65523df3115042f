"""A real Ray cluster on this machine for tests: a head and a worker node, each started with
`ray start` in its own session and temp dir, bound to and advertising 127.0.0.1 only.

Only what these nodes started is stopped (their sessions, by process group): never `ray stop`.
"""

from __future__ import annotations

import contextlib
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
    sessions: dict[str, int] = field(default_factory=dict)

    def start_node(self, name: str, *args: str, cpus: int = 2) -> None:
        temp = self.root / name
        temp.mkdir(parents=True)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "FLOWD_LANE_CACHE": str(temp / "lanes")}
        env.pop("RAY_ADDRESS", None)
        process = subprocess.Popen(
            [*NODE, "start", "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp / "ray"),
             "--num-cpus", str(cpus), "--disable-usage-stats", "--dashboard-agent-listen-port", str(free_port()),
             "--node-name", name, *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.sids.append(process.pid)
        self.sessions[name] = process.pid
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

    def node_named(self, placed: str) -> str:
        """The name of the node a `LanePlaced` names (`<host>/<first 8 of its Ray node id>`): the
        one whose lane cache holds that node id."""
        short = placed.rpartition("/")[2]
        for name, temp in self.nodes.items():
            if any(p.name.startswith(short) for p in (temp / "lanes").glob("*")):
                return name
        raise AssertionError(f"no node of this cluster is {placed}")

    def kill_node(self, name: str) -> None:
        """SIGKILL every process of one node (its session): the node dies as a machine would."""
        sid = self.sessions[name]
        for _ in range(20):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sid, signal.SIGKILL)
            left = _sessions_alive([sid])
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if not left:
                return
            time.sleep(0.2)
        raise AssertionError(f"node {name} would not die")

    def agent_logs(self, name: str) -> list[Path]:
        """The agent log files on a node (every run's, every remote's)."""
        return sorted((self.nodes[name] / "lanes").glob("*/*/repo/.flow/epics/*/agents/*"))

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


def start_cluster(attempts: int = 3, *, head_cpus: int = 2, workers: int = 1) -> Cluster:
    """A head and `workers` worker nodes; on a loaded machine a raylet may miss Ray's fixed 30 s
    start-up window, so the whole cluster is started again (after stopping what the failed try
    started). A head with no CPUs gets no lanes (flowd places lanes on nodes that offer CPUs)."""
    for attempt in range(1, attempts + 1):
        # Short paths: Ray's unix sockets live under the temp dir (108 bytes at most).
        cluster = Cluster(Path(tempfile.mkdtemp(prefix="fray", dir="/tmp")))
        try:
            port = free_port()
            cluster.start_node(
                "head", "--head", "--port", str(port), "--include-dashboard=false", cpus=head_cpus
            )
            cluster.address = f"127.0.0.1:{port}"
            for number in range(1, workers + 1):
                cluster.start_node(
                    "worker" if workers == 1 else f"worker{number}", "--address", cluster.address
                )
            return cluster
        except RuntimeError:
            cluster.stop()
            if attempt == attempts:
                raise
        except BaseException:
            cluster.stop()
            raise
    raise AssertionError("unreachable")
