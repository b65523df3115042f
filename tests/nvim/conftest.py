"""Real Neovim 0.11 (from PyPI, installed on first use into a cache) driving the plugin against a
real `flowd serve`. Each test runs one Lua script headless; the script records what the user
would see and the test asserts on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import GIT_ENV

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "editors" / "nvim"
HARNESS_DIR = Path(__file__).resolve().parent
FLOWD_CMD = [sys.executable, "-m", "flowd", "serve"]


@pytest.fixture(scope="session")
def nvim() -> Path:
    """The Neovim binary: $FLOWD_NVIM, else installed on first use by the plugin's script."""
    given = os.environ.get("FLOWD_NVIM")
    if given:
        return Path(given)
    out = subprocess.run(
        ["sh", str(PLUGIN_DIR / "scripts" / "ensure-nvim.sh")],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=600,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def drive(
    nvim: Path, script: str, tmp_path: Path, env: dict[str, str], timeout: float = 300
) -> dict[str, Any]:
    """Run `script` (in tests/nvim) in headless Neovim; return what it recorded."""
    out_json = tmp_path / f"{Path(script).stem}.out.json"
    home = tmp_path / "nvim-home"  # no user config, state or shada of the machine's user
    home.mkdir(exist_ok=True)
    full_env = {
        **os.environ,
        **GIT_ENV,
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "PLUGIN_DIR": str(PLUGIN_DIR),
        "HARNESS_DIR": str(HARNESS_DIR),
        "FLOWD_CMD": json.dumps(FLOWD_CMD),
        "OUT_JSON": str(out_json),
        **env,
    }
    proc = subprocess.run(
        [str(nvim), "--headless", "--clean", "-l", str(HARNESS_DIR / script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=env.get("REPO", str(tmp_path)),
        stdin=subprocess.DEVNULL,
    )
    assert out_json.exists(), f"nvim wrote nothing (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(out_json.read_text())
    assert out["errors"] == [], f"{out['errors']}\nsteps: {out['steps']}\nnotes: {out['notes'][-15:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out
