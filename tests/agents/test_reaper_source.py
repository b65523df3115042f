"""The native reaper flowd ships as bytes (flowd/agents/reaper_native.py) is exactly what its
source, flowd/agents/reaper_x86_64.s, assembles and links to: nobody has to trust an opaque blob."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from pathlib import Path

from flowd.agents import reaper_native

SOURCE = Path(reaper_native.__file__).with_name("reaper_x86_64.s")


def test_the_shipped_reaper_is_its_source_assembled(tmp_path: Path) -> None:
    assert platform.machine() == "x86_64", "the native reaper is x86-64 code; other machines run reaper.py"
    assert shutil.which("as") and shutil.which("ld"), "binutils (as, ld) are needed: apt-get install binutils"
    obj, exe = tmp_path / "reaper.o", tmp_path / "reaper"
    subprocess.run(["as", "-o", str(obj), str(SOURCE)], check=True)
    subprocess.run(["ld", "-s", "-n", "-static", "-o", str(exe), str(obj)], check=True)
    built = exe.read_bytes()
    assert hashlib.sha256(built).hexdigest() == reaper_native.SHA256
    assert reaper_native.blob() == built
