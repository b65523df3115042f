"""flowd's reaper as a tiny static x86-64 program (flowd/agents/reaper_x86_64.s): what
flowd/agents/reaper.py does, without starting a Python interpreter for every agent, gate and
setup command (docs/sandbox.md "Processes"; `bench/reaper.py` measures the difference).

The bytes are `as` + `ld -s -n -static` of flowd/agents/reaper_x86_64.s (1320 bytes); it takes
the same arguments as reaper.py (`<parent pid> -- <program path> [args...]`; the path must be
resolved, as `reaped` does). flowd writes it once per user under the cache dir, a place no lane
may write, beside the binder (flowd/sandbox/bind.py). Other architectures, a kernel that does not
list a process's children in /proc, or a cache dir that cannot be written, use reaper.py.
"""

from __future__ import annotations

import os

from flowd.base.native import NativeProgram

_X86_64 = (
    "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAeABAAAAAAABAAAAAAAAAAGgEAAAAAAAAAAAAAEAAOAABAEAAAwACAAEAAAAFAAAA"
    "eAAAAAAAAAB4AEAAAAAAAHgAQAAAAAAA2QMAAAAAAADZAwAAAAAAAAEAAAAAAAAATIssJEyNfCQIS41c7whJg/0ED4wBAgAA"
    "SYt3EGaBPi0tD4XyAQAAgH4CAA+F6AEAAEmLdwjoGQMAAEGJxEiB7EAQAABJieVJx0UAA0ABALgOAAAAMf9Mie5JjVUIQboI"
    "AAAADwVJx0UYAAAAAEnHRSAAAAAAScdFKAAAAABJx0UwAAAAAL8BAAAA6IUCAAC/AgAAAOh7AgAAvw8AAADocQIAAL8RAAAA"
    "6GcCAAC/AQAAAL4PAAAA6GwCAAC/JAAAAL4BAAAA6F0CAABFMfa9DwAAALhuAAAADwVEOeAPheUAAAC4OQAAAA8FSIXAD4ie"
    "AAAAdHJJica4gAAAAEyJ7zH2MdJBuggAAAAPBYP4EXQMSIXAeOKJxemrAAAAuD0AAABIx8f/////SY11ELoBAAAARTHSDwVI"
    "hcB+vEw58HXc6PAAAABBi0UQiceD5390C4HHgAAAAOnTAAAAwegID7b46cgAAAC4DgAAAL8CAAAASY11CDHSQboIAAAADwVJ"
    "i38YSY13GEiJ2rg7AAAADwVIjTXSAQAAuhsAAADolgEAAEmLdxjomgEAAOiIAQAASI01zgEAALoBAAAA6HcBAAC/fwAAAOtn"
    "TYX2dD+4PgAAAEyJ974PAAAADwVBvCgAAAC4PQAAAEyJ90mNdRC6AQAAAEUx0g8FSIXAdQ+4gPD6AujzAAAAQf/MddboJQAA"
    "AI29gAAAAOsWSI01ZgEAALo4AAAA6A4BAAC/AgAAALg8AAAADwVBVFNBvEAAAAC4AgAAAEiNPXMBAAAx9g8FSIXAeH9Iiccx"
    "wEmNdUC6/w8AAA8FSInDuAMAAAAPBUiF235gSY11QEyNBB4xwEw5xn05D7YOSP/Gg/kgdBGD6TCD+Ql3JkhrwApIAcjr30iD"
    "+AF+E1ZQSInHuD4AAAC+CQAAAA8FWF4xwOvC6BwAAAC4gJaYAOgwAAAAQf/MD4Vs////6AQAAABbQVzDuD0AAABIx8f/////"
    "Mfa6AQAAAEUx0g8FSIXAf+PDScdFGAAAAABJiUUguCMAAABJjX0YMfYPBcO4DQAAAEmNdRgx0kG6CAAAAA8Fw7idAAAAMdJF"
    "MdJFMcAPBcO4AQAAAL8CAAAADwXDMdKAPBYAdAVI/8Lr9cMxwA+2DoTJdA2D6TBrwAoByEj/xuvsw2Zsb3dkLXJlYXBlcjog"
    "Y2Fubm90IHN0YXJ0IAp1c2FnZTogZmxvd2QtcmVhcGVyIDxwYXJlbnQgcGlkPiAtLSA8cHJvZ3JhbT4gW2FyZ3MuLi5dCi9w"
    "cm9jL3RocmVhZC1zZWxmL2NoaWxkcmVuAAAuc2hzdHJ0YWIALnRleHQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAsAAAABAAAABgAAAAAAAAB4AEAAAAAAAHgAAAAAAAAA"
    "2QMAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAABAAAAAwAAAAAAAAAAAAAAAAAAAAAAAABRBAAAAAAAABEAAAAAAAAA"
    "AAAAAAAAAAABAAAAAAAAAAAAAAAAAAAA"
)
SHA256 = "2029e2ade8db7402e8f133eff7550c4e61e64a985b12119a433ea069167573f1"
_REAPER = NativeProgram("flowd-reaper", _X86_64, SHA256)
_listed: dict[str, bool] = {}


def blob() -> bytes | None:
    """The native reaper for this machine, or None (not x86-64)."""
    return _REAPER.blob()


def _children_listed() -> bool:
    """Whether this kernel lists a process's children (`/proc/thread-self/children`,
    CONFIG_PROC_CHILDREN, on in the usual distributions' kernels): the native reaper finds what is
    below it there, and without it would leave a command's leftovers running."""
    if "children" not in _listed:
        _listed["children"] = os.path.exists("/proc/thread-self/children")
    return _listed["children"]


def native_reaper() -> str | None:
    """The native reaper's path (written on first use, then found with one `stat` per process
    start), or None where there is none: the caller runs reaper.py."""
    if not _children_listed():
        return None
    return _REAPER.path()


__all__ = ["SHA256", "blob", "native_reaper"]
