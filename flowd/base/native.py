"""A tiny static program flowd ships as bytes (the binder, flowd/sandbox/bind.py; the native
reaper, flowd/agents/reaper_native.py): decoded and checked against its SHA-256 once, written
once per user under the cache dir (a place no lane may write), then found with one `stat` per
process start. Each program's assembly source sits beside its module, and a test assembles it
and compares the bytes, so nobody has to trust an opaque blob.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import tempfile
from pathlib import Path


class NativeProgram:
    """One x86-64 program: `name` is its file's name in the cache (with the hash's first digits)."""

    def __init__(self, name: str, x86_64: str, sha256: str) -> None:
        self.name = name
        self.sha256 = sha256
        self._x86_64 = x86_64
        self._checked: bytes | None = None
        self._decoded = False

    def blob(self) -> bytes | None:
        """The program for this machine, or None (not x86-64)."""
        return base64.b64decode(self._x86_64) if platform.machine() == "x86_64" else None

    def checked(self) -> bytes | None:
        """The blob, once decoded and found to be what `sha256` says."""
        if not self._decoded:
            data = self.blob()
            self._checked = (
                data if data is not None and hashlib.sha256(data).hexdigest() == self.sha256 else None
            )
            self._decoded = True
        return self._checked

    def path(self) -> str | None:
        """The program's path, written on first use; None where it cannot be (another machine,
        a cache dir that cannot be written): the caller takes its fallback."""
        data = self.checked()
        if data is None:
            return None
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowd"
        target = cache / f"{self.name}-{self.sha256[:12]}"
        try:
            if target.stat().st_size == len(data):
                return str(target)
        except OSError:
            pass
        try:
            cache.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=cache, prefix=f".{self.name}-")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(temp, 0o755)
            os.replace(temp, target)
        except OSError:
            return None
        return str(target)


__all__ = ["NativeProgram"]
