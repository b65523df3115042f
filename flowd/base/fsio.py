"""Durable file writes: every state file is written to a temp file and renamed into place; and
reads, by flowd unconfined, of places a lane can write, which no link of the lane's leads out of."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import BaseModel

from flowd.base.errors import FileProblems
from flowd.base.jsonl import utf8_text

# What this process last wrote to each file, by digest: detection (docs/sandbox-detection.md) takes
# a state file that changed to exactly these bytes as flowd's own write, not a lane's.
_OWN_WRITES: dict[str, bytes] = {}


def written_by_us(path: Path, data: bytes) -> bool:
    return _OWN_WRITES.get(str(path)) == hashlib.sha256(data).digest()


def write_text_atomic(path: Path, text: str) -> None:
    """`text` written to `path` through a temp file renamed into place, as UTF-8 (a name in it
    that is not UTF-8 escaped: `jsonl.utf8_text`)."""
    text = utf8_text(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    _OWN_WRITES[str(path)] = hashlib.sha256(text.encode("utf-8")).digest()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def put_back(path: Path, data: bytes) -> bool:
    """Write `data` as the file `path` anew in a place a lane can write (its git admin files, a
    reflog): a temp file beside it made with `O_EXCL | O_NOFOLLOW` (a link planted at that name is
    not followed) renamed over it (a link at `path` is replaced, never written through). False
    when it could not be done."""
    tmp = path.with_name(f".{path.name}.flowd-put-back")
    try:
        tmp.unlink(missing_ok=True)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(out, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_model_atomic(path: Path, model: BaseModel) -> None:
    write_text_atomic(path, model.model_dump_json(indent=2, by_alias=True, exclude_none=True) + "\n")


def read_user_text(path: Path) -> str:
    """A file the user wrote (settings, roster, script), or one `FileProblems` sentence naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileProblems(str(path), ["does not exist; check the path"]) from None
    except IsADirectoryError:
        raise FileProblems(str(path), ["is a directory, not a file"]) from None
    except UnicodeDecodeError:
        raise FileProblems(str(path), ["is not UTF-8 text; save it as UTF-8"]) from None
    except OSError as exc:
        raise FileProblems(str(path), [f"cannot be read ({exc.strerror or exc})"]) from None


def open_regular(path: str | Path, *, dir_fd: int | None = None, follow: bool = False) -> BinaryIO | None:
    """The regular file `path` (relative to `dir_fd`), open for reading as data where a lane may
    have replaced it: opened without blocking (a FIFO is never waited on), never as flowd's
    controlling terminal (a link to a terminal device) and, unless `follow`, without reading a
    link in its place through; None, closed again, when it is no regular file (a folder, a FIFO,
    a device: `os.fdopen` would raise for a folder and keep its descriptor). OSError when it
    cannot be opened."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, limit: int | None) -> bytes | None:
    """The bytes of the regular file `path` (the first `limit` of them; None: all), read as data
    (`open_regular`); None when it is no regular file or cannot be read."""
    try:
        handle = open_regular(path)
        if handle is None:
            return None
        with handle:
            return handle.read() if limit is None else handle.read(limit)
    except OSError:
        return None


@contextlib.contextmanager
def open_inside(path: Path, root: str) -> Iterator[BinaryIO | None]:
    """The regular file `path`, open for reading, when it lies inside the real directory `root`:
    its last component is not a link and its real path (the links before it followed) is below
    `root`; None otherwise. For flowd reading, unconfined, what a lane wrote (docs/sandbox.md
    "flowd's own git"): a link the lane planted, in the file's place or a folder's, leads nowhere."""
    try:
        handle = open_regular(path)
    except OSError:
        handle = None
    if handle is None:
        yield None
        return
    with handle:
        try:
            real = os.readlink(f"/proc/self/fd/{handle.fileno()}")
        except OSError:
            real = ""
        yield handle if real.startswith(root.rstrip("/") + "/") else None


def unlink_inside(root: Path, rel: str) -> bool:
    """Remove the file or link `rel` below `root`, every folder on the way opened without
    following a link (a folder a lane swapped for a link after it was listed leads nowhere):
    True when nothing is there any more, False for a folder or a way that is not one."""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        return False
    *folders, name = parts
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        for folder in folders:
            step = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
        if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
            return False
        os.unlink(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
