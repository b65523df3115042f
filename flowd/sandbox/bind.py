"""The binder: a tiny static x86-64 program that binds a Landlock ruleset to itself and then
`exec`s the lane's program (docs/sandbox.md "How a process is confined").

Binding in the child needs two system calls between fork and exec. Python can only run them in a
`preexec_fn`, which forces a full `fork()` of flowd (tens of milliseconds under load, instead of
the `vfork` Python uses otherwise) and runs Python in a forked copy of a threaded process. This
program runs them instead: flowd starts `binder <fd> <n> <uid_map> <gid_map> <mask…> <program>
<argv0> <args…>` the fast way, with the ruleset fd passed down. With n masks (n > 0) it first
gives itself a user and mount namespace of its own (its uid and gid mapped to themselves) and
hides each mask: `d<dir>` under an empty read-only tmpfs, `f<file>` under `/dev/null` (the
user's socket files, docs/sandbox.md "Socket files"; flowd/sandbox/sockets.py). Then it calls
`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self(fd)`, closes the fd and `execve`s the
program with the same environment (exit 126 with one line on stderr if any of it fails, 127 if
the program cannot be run).

The bytes are `as` + `ld -s -n -static` of flowd/sandbox/bind_x86_64.s (920 bytes). Other
architectures bind in a `preexec_fn` instead (without the masks).
"""

from __future__ import annotations

from flowd.base.native import NativeProgram

_X86_64 = (
    "f0VMRgIBAQAAAAAAAAAAAAIAPgABAAAAeABAAAAAAABAAAAAAAAAANgCAAAAAAAAAAAAAEAAOAABAEAAAwACAAEAAAAFAAAA"
    "eAAAAAAAAAB4AEAAAAAAAHgAQAAAAAAATgIAAAAAAABOAgAAAAAAAAEAAAAAAAAATIssJEyNfCQISYP9Bw+MSwEAAEmLdwjo"
    "ZgEAAEGJxEmLdxDoWgEAAEGJxkmNRgdJOcUPjCYBAABNhfYPhMcAAAC4EAEAAL8AAAIQDwVIhcAPhQgBAABIjT2aAQAASI01"
    "zgEAAOgwAQAASI09nAEAAEmLdxjoIAEAAEiNPZ8BAABJi3cg6BABAAC4pQAAAEiNPaIBAABIjTWgAQAAMdJBugBABABFMcAP"
    "BUiFwA+FrAAAADHbTDnzfU9Ji3TfKA+2Bkj/xoP4ZHUWSI09ZwEAAEiNFWcBAABBug8AAADrD0iNPV4BAAAx0kG6ABAAAEUx"
    "wLilAAAADwVIhcB0BkiD+P51W0j/w+usuJ0AAAC/JgAAAL4BAAAAMdJFMdJFMcAPBUiFwHU4uL4BAABEiecx9g8FSIXAdSe4"
    "AwAAAESJ5w8FS4t89yhLjXT3MEuNVO8IuDsAAAAPBb9/AAAA6x2/AgAAAEiNNWgAAAC6JQAAALgBAAAADwW/fgAAALg8AAAA"
    "DwUxwA+2DoTJdA2D6TBrwAoByEj/xuvsw1a4AgAAAL4BAAAAMdIPBV5IhcB4sEiJxzHSgDwWAHQFSP/C6/W4AQAAAA8FSIXA"
    "eJS4AwAAAA8Fw2Zsb3dkOiBsYW5kbG9ja19yZXN0cmljdF9zZWxmIGZhaWxlZAovcHJvYy9zZWxmL3NldGdyb3VwcwAvcHJv"
    "Yy9zZWxmL3VpZF9tYXAAL3Byb2Mvc2VsZi9naWRfbWFwAGRlbnkAbm9uZQAvAHRtcGZzAC9kZXYvbnVsbAAALnNoc3RydGFi"
    "AC50ZXh0AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "CwAAAAEAAAAGAAAAAAAAAHgAQAAAAAAAeAAAAAAAAABOAgAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAEAAAADAAAA"
    "AAAAAAAAAAAAAAAAAAAAAMYCAAAAAAAAEQAAAAAAAAAAAAAAAAAAAAEAAAAAAAAAAAAAAAAAAAA="
)
SHA256 = "800b42fb3a988b9e3df92fad67411637fb4150c6dbe6c104adb3b968e98b577f"
_BINDER = NativeProgram("landlock-bind", _X86_64, SHA256)


def blob() -> bytes | None:
    """The binder for this machine, or None (not x86-64)."""
    return _BINDER.blob()


def binder() -> str | None:
    """The binder's path, written once per user under the cache dir (a place no lane may write);
    None where there is none (the caller binds in a `preexec_fn`)."""
    return _BINDER.path()
