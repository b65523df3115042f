"""Landlock through ctypes: the kernel's unprivileged sandbox for files, signals and abstract
sockets (docs/sandbox.md).

flowd builds a ruleset (an fd holding "these rights beneath these paths") in its own process,
where opening paths is cheap and errors can be reported, and the child only does the two calls
that bind it: `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self`. Rights the running ABI
lacks are masked out (best effort), so one policy serves every kernel from 5.13 on.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Callable
from dataclasses import dataclass

# include/uapi/linux/landlock.h
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
# The only rights a rule on a single file may carry (the rest are about directory entries).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
# IOCTL_DEV (ABI 5) is left unhandled: terminals and /dev/null need their ioctls, and no
# protected place is a device.

# Scopes (ABI 6): a domain reaches no abstract unix socket and signals no process made outside it
# (its own processes and those they start are inside; docs/sandbox.md "Signals", "Sockets").
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
SCOPES = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
SCOPE_ABI = 6

_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# x86_64, arm64 and every asm-generic architecture share these numbers.
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]  # the ABI 1 size: accepted by every ABI


class _ScopedRulesetAttr(ctypes.Structure):
    # The ABI 6 size: network rights (ABI 4) left unhandled, the scopes set.
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    pass


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_NUMBERS = _SYSCALLS.get(platform.machine())


def abi() -> int:
    """The Landlock ABI the kernel offers; 0 when it has none (not Linux, not built in, disabled
    at boot, or a container's seccomp filter refusing the call)."""
    if _LIBC is None or _NUMBERS is None:
        return 0
    version = int(
        _LIBC.syscall(_NUMBERS[0], None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    )
    return max(version, 0)


def scopes(version: int) -> int:
    """The scopes the ABI `version` can set (both from 6, none before)."""
    return SCOPES if version >= SCOPE_ABI else 0


def supported(rights: int, version: int) -> int:
    """`rights` without those the ABI `version` does not know (REFER from 2, TRUNCATE from 3)."""
    if version < 2:
        rights &= ~REFER
    if version < 3:
        rights &= ~TRUNCATE
    return rights


@dataclass(frozen=True)
class Rule:
    """`rights` beneath `path`. `follow` False: a place a lane can write the entry of (its temp
    and cache folders, docs/sandbox.md "Links a lane planted"): granted only when `path` is the
    real path of what it opens, no link anywhere on the way (a link there is not granted)."""

    path: str
    rights: int
    follow: bool = True


class Ruleset:
    """An open ruleset fd; rules are added by path. Close it once the child has started."""

    def __init__(self, version: int) -> None:
        if _LIBC is None or _NUMBERS is None or version <= 0:
            raise LandlockError(errno.ENOSYS, "Landlock is not available")
        self.version = version
        self.handled = supported(READ | WRITE, version)
        self.scoped = scopes(version)
        attr: ctypes.Structure = (
            _ScopedRulesetAttr(self.handled, 0, self.scoped) if self.scoped else _RulesetAttr(self.handled)
        )
        fd = int(_LIBC.syscall(_NUMBERS[0], ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0))
        if fd < 0:
            code = ctypes.get_errno()
            raise LandlockError(code, f"landlock_create_ruleset: {os.strerror(code)}")
        self.fd = fd
        self.skipped: list[str] = []  # paths that were not there (nothing to grant)

    def allow(self, path: str, rights: int, follow: bool = True) -> None:
        assert _LIBC is not None and _NUMBERS is not None
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
        except OSError:
            self.skipped.append(path)
            return
        try:
            mode = os.fstat(target).st_mode  # what was opened, not what the path names now
            if not follow and not _is_itself(target, path, mode):
                self.skipped.append(path)
                return
            if not stat.S_ISDIR(mode):
                rights &= FILE_RIGHTS
            attr = _PathBeneath(rights & self.handled, target)
            if attr.allowed_access == 0:
                return
            done = int(_LIBC.syscall(_NUMBERS[1], self.fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0))
            if done != 0:
                code = ctypes.get_errno()
                raise LandlockError(code, f"landlock_add_rule {path}: {os.strerror(code)}")
        finally:
            os.close(target)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def binder(self) -> Callable[[], None]:
        """What the child runs between fork and exec: two system calls, nothing else (it runs
        in a forked copy of a threaded process, so it must take no lock; see docs/sandbox.md)."""
        assert _LIBC is not None and _NUMBERS is not None
        prctl, syscall, number, fd = _LIBC.prctl, _LIBC.syscall, _NUMBERS[2], self.fd

        def bind() -> None:
            if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or syscall(number, fd, 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")

        return bind


def _is_itself(fd: int, path: str, mode: int) -> bool:
    """The `O_PATH|O_NOFOLLOW` fd `fd` is `path` itself: not a link (the last part), and its real
    path is `path` (no link in a parent either)."""
    if stat.S_ISLNK(mode):
        return False
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == os.path.normpath(path)
    except OSError:
        return False


def build(rules: list[Rule], version: int) -> Ruleset:
    ruleset = Ruleset(version)
    try:
        for rule in rules:
            ruleset.allow(rule.path, rule.rights, rule.follow)
    except BaseException:
        ruleset.close()
        raise
    return ruleset
