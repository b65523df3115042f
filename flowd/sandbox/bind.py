"""The binder: a tiny static x86-64 program that binds a Landlock ruleset to itself and then
`exec`s the lane's program (docs/sandbox.md "How a process is confined").

Binding in the child needs two system calls between fork and exec. Python can only run them in a
`preexec_fn`, which forces a full `fork()` of flowd (tens of milliseconds under load, instead of
the `vfork` Python uses otherwise) and runs Python in a forked copy of a threaded process. This
program runs them instead: flowd starts `binder <fd> <program> <argv0> <args…>` the fast way,
with the ruleset fd passed down; it calls `prctl(PR_SET_NO_NEW_PRIVS)`,
`landlock_restrict_self(fd)`, closes the fd and `execve`s the program with the same environment
(exit 126 with one line on stderr if binding fails, 127 if the program cannot be run).

The bytes are `as` + `ld -s -n -static` of flowd/sandbox/bind_x86_64.s (528 bytes). Other
architectures bind in a `preexec_fn` instead.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import tempfile
from pathlib import Path

_X86_64 = (
    "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAeABAAAAAAABAAAAAAAAAAFABAAAAAAAAAAAAAEAAOAABAEAAAwACAAEAAAAFAAAA"
    "eAAAAAAAAAB4AEAAAAAAAHgAQAAAAAAAxwAAAAAAAADHAAAAAAAAAAEAAAAAAAAATIssJEmD/QR8dEiLdCQQMf8PtgaEwHQN"
    "g+gwa/8KAcdI/8br7EGJ/LidAAAAvyYAAAC+AQAAADHSRTHSRTHADwVIhcB1OLi+AQAARInnMfYPBUiFwHUnuAMAAABEiecP"
    "BUiLfCQYSI10JCBKjVTsELg7AAAADwW/fwAAAOsdvwIAAABIjTUYAAAAuiUAAAC4AQAAAA8Fv34AAAC4PAAAAA8FZmxvd2Q6"
    "IGxhbmRsb2NrX3Jlc3RyaWN0X3NlbGYgZmFpbGVkCgAuc2hzdHJ0YWIALnRleHQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAsAAAABAAAABgAAAAAAAAB4AEAAAAAAAHgAAAAAAAAA"
    "xwAAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAABAAAAAwAAAAAAAAAAAAAAAAAAAAAAAAA/AQAAAAAAABEAAAAAAAAA"
    "AAAAAAAAAAABAAAAAAAAAAAAAAAAAAAA"
)
SHA256 = "2cb8ea43ee4749e41a6d6503ffd9755bf360f85ea1daa6ea72daa9ca6be56a50"
_decoded: dict[str, bytes | None] = {}


def blob() -> bytes | None:
    """The binder for this machine, or None (not x86-64)."""
    return base64.b64decode("".join(_X86_64)) if platform.machine() == "x86_64" else None


def binder() -> str | None:
    """The binder's path, written once per user under the cache dir (a place no lane may write);
    None where there is none (the caller binds in a `preexec_fn`)."""
    data = _blob_once()
    if data is None:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowd"
    target = cache / f"landlock-bind-{SHA256[:12]}"
    try:
        if target.stat().st_size == len(data):  # one stat per process start once it is there
            return str(target)
    except OSError:
        pass
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=cache, prefix=".bind-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temp, 0o755)
        os.replace(temp, target)
    except OSError:
        return None
    return str(target)


def _blob_once() -> bytes | None:
    if "blob" not in _decoded:
        data = blob()
        _decoded["blob"] = data if data is not None and hashlib.sha256(data).hexdigest() == SHA256 else None
    return _decoded["blob"]
