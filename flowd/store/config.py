"""Project settings (`.flow/config.toml`) and the roster (`.flow/roster.toml`): models and loading.

Both files are optional. Every problem in a file is reported in one `FileProblems` error that
names the file. The roster is merged by executor `id` over the user-level roster
(`$XDG_CONFIG_HOME/flowd/roster.toml`, default `~/.config/flowd/roster.toml`); `disabled = true`
removes an inherited entry; `${VAR}` is the only expansion, applied to `env` values.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator

from flowd.base import paths
from flowd.base.errors import FileProblems
from flowd.base.fsio import read_user_text
from flowd.base.wire import StrictWireModel, describe_validation_error

Role = Literal["planner", "coder", "reviewer", "judge"]
ROLES: tuple[Role, ...] = ("planner", "coder", "reviewer", "judge")
ExecutorKind = Literal["acp", "cli", "openai", "script"]
TEXT_ROLES: frozenset[str] = frozenset({"planner", "reviewer", "judge"})


class PriceOverride(StrictWireModel):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class WorktreeSettings(StrictWireModel):
    """`[worktree]`: what a new worktree gets from the user's checkout (docs/worktree-bootstrap.md)."""

    include: str = ".worktreeinclude"
    port_base: int = Field(default=41000, ge=1, le=65535)
    ports_per_lane: int = Field(default=10, ge=1, le=1000)
    # docs/repositories.md "Sparse worktrees": a story's worktree checks out only the folders its
    # perimeter names, plus `sparseDirs` (what every story's gates and agents also need). Unset on
    # a big checkout: on (docs/repositories.md "Big repositories").
    sparse: bool = False
    sparse_dirs: list[str] = Field(default_factory=list)
    # docs/repositories.md "Worktree reuse": spare worktrees left for the next run (of any epic)
    # when a run ends, so its lanes write only what differs instead of whole checkouts.
    # Unset on a big checkout: as many as the lanes use, within `spareDiskBudgetMb` (docs/repositories.md
    # "Big repositories"); 0 keeps none.
    keep_spares: int = Field(default=0, ge=0, le=64)
    # Megabytes the spares a run keeps by itself may take on disk (one whole checkout each).
    spare_disk_budget_mb: int = Field(default=2048, ge=0)

    @field_validator("sparse_dirs")
    @classmethod
    def _folders(cls, value: list[str]) -> list[str]:
        for entry in value:
            if (why := paths.unsafe_reason(entry)) is not None:
                raise ValueError(f"{entry!r} {why}, like 'libs/common'")
        return value

    @field_validator("include")
    @classmethod
    def _inside_repo(cls, value: str) -> str:
        parts = value.replace("\\", "/").split("/")
        if not value.strip() or value.startswith(("/", "~")) or ".." in parts:
            raise ValueError(f"{value!r} must name a file inside the repository, like '.worktreeinclude'")
        return value


class LanesSettings(StrictWireModel):
    """`[lanes]` of `.flow/config.toml`: where story lanes run (docs/scale-out.md)."""

    engine: Literal["local", "ray"] = "local"
    # "auto": RAY_ADDRESS or a running cluster, else a local instance; or "ray://host:10001", "host:port".
    address: str = Field(default="auto", min_length=1)
    remote: str = Field(default="origin", min_length=1)  # a git remote name or URL
    # Where the merge train's candidate gates run: "runner" (this machine) or "cluster" (the
    # least loaded node, docs/scale-out.md "Candidate gates on the cluster").
    candidate_gates: Literal["runner", "cluster"] = "runner"

    @field_validator("candidate_gates")
    @classmethod
    def _cluster_needs_ray(cls, value: str, info: ValidationInfo) -> str:
        # Silently gating on the runner would leave a user believing the cluster does it.
        if value == "cluster" and info.data.get("engine", "local") != "ray":
            raise ValueError('"cluster" needs engine = "ray" (the nodes are the lanes\' cluster)')
        return value


SandboxMode = Literal["enforce", "detect", "off"]


class SandboxSettings(StrictWireModel):
    """`[sandbox]`: how lanes are confined (docs/sandbox.md) and checked (docs/sandbox-detection.md).

    `allowWrite`/`allowRead` entries are absolute, `~/`-relative or repository-relative paths."""

    mode: SandboxMode = "enforce"
    allow_write: list[str] = Field(default_factory=list)
    allow_read: list[str] = Field(default_factory=list)

    @field_validator("allow_write", "allow_read")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry.strip() or "\0" in entry:
                raise ValueError(f"{entry!r} must name a path, like '~/.cache/my-build' or '/opt/cache'")
        return value


class DaemonSettings(StrictWireModel):
    """`[daemon]`: the repository's shared daemon (docs/editors.md, "One daemon per repository")."""

    # Seconds with no session and no live run before the daemon exits.
    idle_exit_s: float = Field(default=600.0, ge=0)


class Settings(StrictWireModel):
    """`.flow/config.toml` (docs/running.md). Every key is optional."""

    concurrency: int = Field(default=3, ge=1, le=64)
    task_concurrency: int = Field(default=1, ge=1, le=16)
    gates: list[str] = Field(default_factory=list)
    setup: list[str] = Field(default_factory=list)
    judge_rounds: int = Field(default=2, ge=0, le=10)
    max_review_rounds: int = Field(default=2, ge=0, le=10)
    # docs/revisions.md: a red merge goes back to the story's coder; a red gate is run again.
    merge_revision_rounds: int = Field(default=1, ge=0, le=10)
    gate_retries: int = Field(default=1, ge=0, le=5)
    # docs/merging.md: the merge train. Most stories gated together (1: one at a time, 0: auto) and
    # candidate gate runs at once (speculation; 0: auto).
    merge_batch: int = Field(default=0, ge=0, le=64)
    merge_concurrency: int = Field(default=0, ge=0, le=16)
    fail_fast: bool = False
    budget_usd: float | None = Field(default=None, gt=0)
    story_budget_usd: float | None = Field(default=None, gt=0)
    # What waits for an answer instead of halting or waiting (docs/answers.md).
    pause_on: list[Literal["budget", "blocked", "noExecutor", "merge"]] = Field(default_factory=list)
    worktree_root: str | None = None
    time_zone: str | None = None
    prices: dict[str, PriceOverride] = Field(default_factory=dict)
    # Documented in docs/running.md.
    turn_timeout_s: float = Field(default=1800.0, gt=0)
    stall_timeout_s: float = Field(default=600.0, gt=0)
    gate_timeout_s: float = Field(default=1800.0, gt=0)
    worktree: WorktreeSettings = Field(default_factory=WorktreeSettings)
    lanes: LanesSettings = Field(default_factory=LanesSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {value!r} (use an IANA name like 'Europe/Rome')")
        return value


class ExecutorSpec(StrictWireModel):
    """One `[[executors]]` entry of the roster (docs/roster.md)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    kind: ExecutorKind
    command: list[str] | None = None
    model: str | None = None
    base_url: str | None = None
    script: str | None = None
    roles: list[Role] = Field(default_factory=lambda: list(ROLES))
    slots: int = Field(default=1, ge=1, le=64)
    coder_slots: int | None = Field(default=None, ge=0)
    priority: int | dict[str, int] = 1
    env: dict[str, str] = Field(default_factory=dict)
    disabled: bool = False
    # Set by the loader, never serialised: env with ${VAR} expanded, and the script's absolute path.
    _resolved_env: dict[str, str] = PrivateAttr(default_factory=dict)
    _script_path: Path | None = PrivateAttr(default=None)

    @property
    def resolved_env(self) -> dict[str, str]:
        return dict(self._resolved_env)

    @property
    def script_path(self) -> Path | None:
        return self._script_path

    @property
    def coder_capacity(self) -> int:
        if "coder" not in self.roles:
            return 0
        return self.slots if self.coder_slots is None else min(self.coder_slots, self.slots)

    def priority_for(self, role: str) -> int:
        if isinstance(self.priority, int):
            return self.priority
        return self.priority.get(role, self.priority.get("default", 1))


class RosterFile(StrictWireModel):
    executors: list[ExecutorSpec] = Field(default_factory=list)


class Roster(StrictWireModel):
    """The merged roster, with the files it came from (for error messages)."""

    executors: list[ExecutorSpec] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)

    def get(self, executor_id: str) -> ExecutorSpec | None:
        return next((e for e in self.executors if e.id == executor_id), None)

    def for_role(self, role: str) -> list[ExecutorSpec]:
        return [e for e in self.executors if role in e.roles]

    @property
    def described(self) -> str:
        if self.sources:
            return " + ".join(self.sources)
        return f"no roster file: neither .flow/roster.toml nor {user_roster_path()} exists"


def flow_dir(repo: Path) -> Path:
    return repo / ".flow"


def user_roster_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "flowd" / "roster.toml"


def read_toml(path: Path) -> dict[str, Any]:
    text = read_user_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FileProblems(str(path), [f"is not valid TOML ({exc})"])


def load_settings(repo: Path) -> Settings:
    path = flow_dir(repo) / "config.toml"
    if not path.exists():
        return Settings()
    data = read_toml(path)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise FileProblems(str(path), describe_validation_error(exc))


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str, environ: dict[str, str] | os._Environ[str]) -> tuple[str, list[str]]:
    """Expand `${VAR}` only (no `$VAR`, no defaults, no commands); returns the value and missing names."""
    missing: list[str] = []

    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            missing.append(name)
            return ""
        return environ[name]

    return _VAR.sub(repl, value), missing


def load_roster(repo: Path, *, user_path: Path | None = None) -> Roster:
    """Merge the user-level roster and the project roster by id, validate, expand env."""
    user = user_path if user_path is not None else user_roster_path()
    project = flow_dir(repo) / "roster.toml"
    merged: dict[str, dict[str, Any]] = {}
    origin: dict[str, Path] = {}
    sources: list[str] = []
    for path in (user, project):
        if not path.exists():
            continue
        sources.append(str(path))
        data = read_toml(path)
        entries = data.get("executors", [])
        extra = sorted(set(data) - {"executors"})
        problems = [f"{key}: unknown key (the roster holds only [[executors]])" for key in extra]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise FileProblems(str(path), ["executors: must be an array of tables ([[executors]])"])
        seen: set[str] = set()
        for index, entry in enumerate(entries):
            ident = entry.get("id")
            if not isinstance(ident, str) or not ident:
                problems.append(f"executors[{index}].id: is required")
                continue
            if ident in seen:
                problems.append(f"executors[{index}].id: duplicate executor id {ident!r}")
                continue
            seen.add(ident)
            if entry.get("disabled") is True:
                merged.pop(ident, None)
                origin.pop(ident, None)
                continue
            merged[ident] = {**merged.get(ident, {}), **entry}
            if "script" in entry or ident not in origin:
                origin[ident] = path
        if problems:
            raise FileProblems(str(path), problems)

    executors: list[ExecutorSpec] = []
    problems_by_file: dict[Path, list[str]] = {}
    for ident, raw in merged.items():
        path = origin[ident]
        label = f"executors[{ident}]"
        try:
            spec = ExecutorSpec.model_validate(raw)
        except ValidationError as exc:
            problems_by_file.setdefault(path, []).extend(describe_validation_error(exc, label))
            continue
        problems = _check_executor(spec, path, label)
        if problems:
            problems_by_file.setdefault(path, []).extend(problems)
            continue
        executors.append(spec)
    if problems_by_file:
        path, problems = next(iter(problems_by_file.items()))
        for other, more in list(problems_by_file.items())[1:]:
            problems.extend(f"({other}) {p}" for p in more)
        raise FileProblems(str(path), problems)
    return Roster(executors=executors, sources=sources)


def _check_executor(spec: ExecutorSpec, path: Path, label: str) -> list[str]:
    problems: list[str] = []
    if spec.kind in ("acp", "cli") and not spec.command:
        problems.append(f"{label}.command: kind {spec.kind!r} needs the command to start")
    if spec.kind == "openai":
        if not spec.base_url:
            problems.append(f"{label}.baseUrl: kind 'openai' needs the server's base URL")
        if not spec.model:
            problems.append(f"{label}.model: kind 'openai' needs a model name")
        if "coder" in spec.roles:
            problems.append(f"{label}.roles: kind 'openai' serves planner, reviewer and judge, not coder")
    if spec.kind == "script":
        if not spec.script:
            problems.append(f"{label}.script: kind 'script' needs a script file")
        else:
            script = (path.parent / spec.script).resolve()
            if not script.is_file():
                problems.append(f"{label}.script: {script} does not exist")
            else:
                # Imported here: the script model reuses this module's error wording.
                from flowd.store.script_model import load_script

                try:
                    load_script(script)
                except FileProblems as exc:
                    problems.append(f"{label}.script: {exc}")
            spec._script_path = script
    if spec.coder_slots is not None and spec.coder_slots > spec.slots:
        problems.append(f"{label}.coderSlots: {spec.coder_slots} is more than slots ({spec.slots})")
    if isinstance(spec.priority, dict):
        unknown = sorted(set(spec.priority) - {*ROLES, "default"})
        if unknown:
            problems.append(f"{label}.priority: unknown role(s) {', '.join(unknown)}")
    resolved: dict[str, str] = {}
    for key, value in spec.env.items():
        expanded, missing = expand_env(value, os.environ)
        for name in missing:
            problems.append(f"{label}.env.{key}: ${{{name}}} is not set in the environment")
        resolved[key] = expanded
    spec._resolved_env = resolved
    return problems
