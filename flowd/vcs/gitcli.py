"""The git command line as flowd runs it: an environment that points git at the repository named
and no other, never a prompt or a hook, parsable messages; every failure a `GitError` naming what
could not be done with git's own reason (docs/repositories.md).

Almost everything runs the git CLI directly: GitPython spawns the same processes with extra
overhead on the hot path and has no worktree support (`gitops.Repo.discover` is its one use).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from flowd.base.errors import EXIT_FAILED, FlowdError, InputError

FLOW_DIR = ".flow/"

# Variables that would point git at another repository or index than the one we name.
_LEAKY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX")

# Parsable messages ("nothing to commit", "Already up to date") and never a prompt.
_FIXED_ENV = {"LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"}


class GitError(FlowdError):
    """A git operation failed; the run cannot go on with this story (or at all)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


# The user's hooks (a `core.hooksPath` in ~/.gitconfig, husky, pre-commit) never run on flowd's
# own git commands: `--no-verify` skips only some (pre-commit, commit-msg, pre-merge-commit), not
# post-checkout, post-commit, post-merge or reference-transaction (docs/repositories.md).
_NO_HOOKS = ("core.hooksPath", os.devnull)
# git's parallel checkout, one worker per core, for flowd's own worktrees: a whole checkout of a
# big repository is file creation, faster from several processes (below 100 files git writes
# them alone anyway). An environment that sets `checkout.workers` already keeps its own.
_WORKERS = ("checkout.workers", "0")


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # Built per call (cheap) so a changed environment, as in tests, is always honoured.
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
    env.update(_FIXED_ENV)
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    # Appended to any GIT_CONFIG_COUNT list the environment already has (git 2.31 and later).
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    except ValueError:
        count = 0
    keys = {env.get(f"GIT_CONFIG_KEY_{i}", "").lower() for i in range(count)}
    ours = [_NO_HOOKS] + ([] if _WORKERS[0].lower() in keys else [_WORKERS])
    for n, (key, value) in enumerate(ours, start=count):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(count + len(ours))
    if extra:
        env.update(extra)
    return env


def git_reason(proc: subprocess.CompletedProcess[str]) -> str:
    """Git's own explanation: the last fatal/error line, else the last non-blank output line."""
    raw = [ln.rstrip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines() if ln.strip()]
    for i in range(len(raw) - 1, -1, -1):
        for prefix in ("fatal: ", "error: "):
            if raw[i].startswith(prefix):
                line = raw[i][len(prefix) :].rstrip(".")
                if line.endswith(":"):
                    # "...would be overwritten by merge:" is followed by the paths, tab-indented.
                    listed = [ln.strip() for ln in raw[i + 1 :] if ln.startswith("\t")]
                    line = f"{line} {', '.join(listed)}" if listed else line.rstrip(":")
                return line
    return raw[-1].strip().rstrip(".") if raw else f"git exited with code {proc.returncode}"


def run_git(
    cwd: Path,
    args: Sequence[str],
    what: str,
    *,
    ok_codes: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in `cwd`; a non-accepted exit raises GitError("<what>: <git's reason>")."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=git_env(env),
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        if not cwd.is_dir():
            raise GitError(f"{what}: the directory {cwd} does not exist") from exc
        raise InputError("git is not installed or not on PATH; install git and try again") from exc
    if proc.returncode not in ok_codes:
        raise GitError(f"{what}: {git_reason(proc)}", detail=(proc.stderr + proc.stdout).strip())
    return proc


def split_z(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def not_flow(paths: list[str]) -> list[str]:
    return [p for p in paths if not (p + "/").startswith(FLOW_DIR)]


def private_git_dir(wt: Path) -> Path | None:
    """The git dir of the worktree (or checkout) `wt`, read from its `.git`; None without one."""
    dotgit = Path(wt) / ".git"
    if dotgit.is_dir():
        return dotgit
    try:
        line = dotgit.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = Path(line.removeprefix("gitdir:").strip())
    return gitdir if gitdir.is_absolute() else Path(wt) / gitdir


def unchecked_out(wt: Path) -> bool:
    """`wt` is a worktree git records whose checkout was never made (it has no index yet): one
    added with `--no-checkout`, by flowd on purpose or by a process killed before the checkout."""
    admin = private_git_dir(wt)
    return admin is not None and admin.is_dir() and not (admin / "index").exists()


def same_path(a: Path, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def remove_tree(path: Path, what: str) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GitError(f"{what}: {exc.strerror or exc}") from exc


def toplevel(cwd: Path) -> Path | None:
    """The root of the checkout holding `cwd`, or None outside any (no GitPython: it is quick)."""
    try:
        proc = run_git(cwd, ["rev-parse", "--show-toplevel"], "", ok_codes=range(256))
    except FlowdError:
        return None
    top = proc.stdout.strip()
    return Path(top) if proc.returncode == 0 and top else None
