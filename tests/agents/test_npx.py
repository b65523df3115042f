"""An `npx -y PACKAGE` agent command under enforce (flowd/agents/npx.py): npx installs the package
once, unconfined, in the user's npm cache, and the confined lane starts the installed program
directly, without writing that cache. Real npm and npx, a real package tarball made here (no
registry), a real Landlock-confined process."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flowd.agents import npx
from flowd.sandbox.confine import active
from tests.sandbox.test_confine import _confinement, _sh, lane

__all__ = ["lane"]  # the fixture, taken from the confinement tests


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["npx", "-y", "@scope/agent@1.2.3"], ("@scope/agent@1.2.3", [])),
        (["/usr/bin/npx", "--yes", "agent", "--acp"], ("agent", ["--acp"])),
        (["npx", "agent"], ("agent", [])),
        (["npx", "-p", "agent", "agent-bin"], None),  # another npx option: run as written
        (["npx", "-y"], None),
        (["claude-agent-acp"], None),
        ([], None),
    ],
)
def test_which_commands_are_an_npx_package(command: list[str], expected: object) -> None:
    assert npx.npx_package(command) == expected


def _package(root: Path, bins: dict[str, str] | str) -> Path:
    """A packed npm package `@flowd-test/hello` whose command prints its arguments."""
    src = root / "pkg"
    src.mkdir()
    meta = {"name": "@flowd-test/hello", "version": "1.0.0", "bin": bins}
    (src / "package.json").write_text(json.dumps(meta), encoding="utf-8")
    script = "#!/usr/bin/env node\nconsole.log('hello ' + process.argv.slice(2).join(' '))\n"
    for target in {bins} if isinstance(bins, str) else set(bins.values()):
        (src / target).write_text(script, encoding="utf-8")
    subprocess.run(["npm", "pack", "-q"], cwd=src, check=True, capture_output=True)
    return src / "flowd-test-hello-1.0.0.tgz"


@pytest.fixture
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert shutil.which("npx"), "these tests need node and npm (the README's requirements)"
    cache = tmp_path / "npm-cache"
    monkeypatch.setenv("npm_config_cache", str(cache))
    return cache


@pytest.mark.parametrize("bins", [{"hello": "hello.js"}, "hello.js", {"hello": "a.js", "other": "b.js"}])
def test_the_package_resolves_to_the_program_npx_would_run(
    tmp_path: Path, user_cache: Path, bins: dict[str, str] | str
) -> None:
    tarball = _package(tmp_path, bins)
    argv = asyncio.run(npx.resolved(["npx", "-y", str(tarball), "a", "b"], dict(os.environ)))
    assert argv[1:] == ["a", "b"] and argv[0].startswith(str(user_cache / "_npx"))
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == "hello a b\n"


def test_a_package_npx_cannot_name_one_program_of_runs_as_written(tmp_path: Path, user_cache: Path) -> None:
    tarball = _package(tmp_path, {"one": "a.js", "two": "b.js"})
    command = ["npx", "-y", str(tarball)]
    assert asyncio.run(npx.resolved(command, dict(os.environ))) == command


def test_a_confined_lane_runs_the_installed_program_and_leaves_the_users_cache_alone(
    lane: Path, tmp_path: Path, user_cache: Path
) -> None:
    tarball = _package(tmp_path, {"hello": "hello.js"})
    confinement = _confinement(lane)
    with active(confinement):
        argv = asyncio.run(npx.for_lane(["npx", "-y", str(tarball), "lane"], dict(os.environ)))
    assert argv[0].startswith(str(user_cache))
    before = sorted(str(p) for p in user_cache.rglob("*"))
    # The lane reads the program; its own writes to the user's cache are refused.
    out = _sh(confinement, lane, f"{argv[0]} {argv[1]}; echo x > {user_cache}/planted || echo REFUSED")
    assert out.splitlines()[0] == "hello lane" and "REFUSED" in out, out
    assert sorted(str(p) for p in user_cache.rglob("*")) == before


def test_unconfined_the_command_runs_as_written(tmp_path: Path, user_cache: Path) -> None:
    command = ["npx", "-y", "@flowd-test/never-installed"]
    assert asyncio.run(npx.for_lane(command, dict(os.environ))) == command
    assert not user_cache.exists()  # nothing was asked of npx
