"""The README's install path, as a newcomer takes it: `pip install .` into a fresh virtual
environment, then `flowd` from a new shell whose PATH holds only that environment and the system.

The install resolves the real dependencies (pip's cache keeps it quick); the package is built
from a copy of the sources, so the build leaves nothing in the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _sources(dest: Path) -> Path:
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "flowd", dest / "flowd", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_pip_install_puts_flowd_on_path_and_the_demo_runs(tmp_path: Path) -> None:
    src = _sources(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    install = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)],
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    built = install.stdout + install.stderr
    assert "BuildBackendWarning" not in built and "project.license" not in built, built

    # A new shell: this environment's bin and the system's, nothing of the test's own venv.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    flowd = shutil.which("flowd", path=env["PATH"])
    assert flowd == str(venv / "bin" / "flowd")
    version = subprocess.run(["flowd", "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("flowd "), version.stderr

    home = tmp_path / "home"
    home.mkdir()
    demo = subprocess.run(
        ["flowd", "demo", "--dir", str(home / "calc")],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    assert out.splitlines()[1].startswith("run calc-")
    assert "# Epic report: calc" in out and out.count("| done |") == 5
    assert out.endswith(f"try `cd {home / 'calc'} && flowd status`); delete it when done.\n")
    status = subprocess.run(
        ["flowd", "status"], cwd=home / "calc", env=env, capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0 and "Epic calc [done] 5/5 stories" in status.stdout, status.stderr
