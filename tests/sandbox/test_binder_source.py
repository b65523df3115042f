"""The binder flowd ships as bytes (flowd/sandbox/bind.py) is exactly what its source,
flowd/sandbox/bind_x86_64.s, assembles and links to: nobody has to trust an opaque blob."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from pathlib import Path

from flowd.sandbox import bind

SOURCE = Path(bind.__file__).with_name("bind_x86_64.s")


def test_the_shipped_binder_is_its_source_assembled(tmp_path: Path) -> None:
    assert platform.machine() == "x86_64", "the binder is x86-64 code; other machines bind in a preexec_fn"
    assert shutil.which("as") and shutil.which("ld"), "binutils (as, ld) are needed: apt-get install binutils"
    obj, exe = tmp_path / "bind.o", tmp_path / "bind"
    subprocess.run(["as", "-o", str(obj), str(SOURCE)], check=True)
    subprocess.run(["ld", "-s", "-n", "-static", "-o", str(exe), str(obj)], check=True)
    built = exe.read_bytes()
    assert hashlib.sha256(built).hexdigest() == bind.SHA256
    assert bind.blob() == built
