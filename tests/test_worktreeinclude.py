"""`.worktreeinclude` patterns reaching outside the repository, as a table (no files read)."""

from __future__ import annotations

import pytest

from flowd.vcs.worktreeinclude import Escape, describe, escapes, pattern_of

ROOT = "/home/me/app"
IN_REPO = {"bin", "config", "src"}  # entries at the repository's root
ON_DISK = {"home", "etc", "bin", "tmp"}  # folders at the file system's root

OUT = "list only paths inside the repository, relative to its root"


def found(text: str) -> list[Escape]:
    return escapes(text, ROOT, at_root=IN_REPO.__contains__, on_disk=ON_DISK.__contains__)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (".env\nconfig/*.local.toml\n!config/keep.toml\n", []),
        ("# ../a comment\n\n   \n", []),
        ("/config/local.toml\n", []),  # anchored at the repository root
        ("/bin/\n", []),  # `bin` is the repository's own, though /bin exists too
        ("/build/out\n", []),  # neither in the repository nor on disk: an anchor
        ("..x\nx..\n", []),  # dots inside a name are no parent
        ("../shared/.env\n", [Escape(1, "../shared/.env", "reaches outside the repository with `..`", OUT)]),
        (".env\nsrc/../../x\n", [Escape(2, "src/../../x", "reaches outside the repository with `..`", OUT)]),
        ("!../keep\n", [Escape(1, "../keep", "reaches outside the repository with `..`", OUT)]),
        ("..\\secret\n", [Escape(1, "..\\secret", "reaches outside the repository with `..`", OUT)]),
        (
            "~/.aws/credentials\n",
            [Escape(1, "~/.aws/credentials", "names a path outside the repository", OUT)],
        ),
        ("C:\\secrets\\.env\n", [Escape(1, "C:\\secrets\\.env", "names a path outside the repository", OUT)]),
        ("/etc/hosts\n", [Escape(1, "/etc/hosts", "is an absolute path outside the repository", OUT)]),
        (
            "/home/me/other/.env\n",
            [Escape(1, "/home/me/other/.env", "is an absolute path outside the repository", OUT)],
        ),
        (
            "/home/me/app/.env\n",  # the repository's own file, written absolute
            [Escape(1, "/home/me/app/.env", "is an absolute path", "write it as `/.env` instead")],
        ),
        (
            "../a\n/etc/b\n",
            [
                Escape(1, "../a", "reaches outside the repository with `..`", OUT),
                Escape(2, "/etc/b", "is an absolute path outside the repository", OUT),
            ],
        ),
    ],
)
def test_escapes(text: str, expected: list[Escape]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    ("line", "pattern"),
    [("", None), ("# note", None), ("  ", None), (".env  ", ".env"), ("!keep", "keep"), ("a\\ ", "a\\ ")],
)
def test_pattern_of(line: str, pattern: str | None) -> None:
    assert pattern_of(line) == pattern


def test_describe_names_file_line_and_fix() -> None:
    escape = Escape(3, "../x", "reaches outside the repository with `..`", OUT)
    assert describe("/r/.worktreeinclude", escape) == (
        "/r/.worktreeinclude:3: `../x` reaches outside the repository with `..`; " + OUT
    )
