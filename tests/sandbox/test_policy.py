"""The confinement's rules as tables: the mode in force, the status line, what kind of place a
path is, the refusals the tools print, and the read allow-list around the secrets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowd.sandbox import landlock, sockets
from flowd.sandbox.confine import Confinement, effective_mode, status_line, unsealed
from flowd.sandbox.policy import Protected, read_rules, what_is


@pytest.mark.parametrize(
    ("setting", "version", "mode"),
    [
        ("enforce", 7, "enforce"),
        ("enforce", 2, "enforce"),
        ("enforce", 1, "detect"),  # git cannot store an object under ABI 1 (no REFER)
        ("enforce", 0, "detect"),  # no Landlock: never a claim of confinement
        ("detect", 7, "detect"),
        ("off", 7, "off"),
        ("off", 0, "off"),
        ("detect", 0, "detect"),
    ],
)
def test_the_mode_in_force(setting: str, version: int, mode: str) -> None:
    assert effective_mode(setting, version) == mode


def test_the_status_line_names_this_kernels_mechanism() -> None:
    version = landlock.abi()
    assert version >= landlock.SCOPE_ABI and sockets.available(), "this machine: ABI 7, user namespaces"
    # What no ABI of this kernel closes is named after what it enforces (docs/sandbox.md).
    expected = (
        f"sandbox: landlock ABI {version} (enforce); not sealed: socket files outside the hidden places"
    )
    assert status_line("enforce") == expected
    assert re.fullmatch(r"sandbox: (landlock ABI \d+|none available) \(off\)", status_line("off"))
    assert status_line("detect") == f"sandbox: landlock ABI {version} (detect)"


@pytest.mark.parametrize(
    ("version", "masking", "gaps"),
    [
        (7, True, ["socket files outside the hidden places"]),
        (6, False, ["socket files"]),  # no user namespaces: no socket file is hidden
        (5, True, ["signals", "abstract sockets", "socket files outside the hidden places"]),
        (2, False, ["signals", "abstract sockets", "socket files"]),
    ],
)
def test_what_an_older_kernel_leaves_unsealed(version: int, masking: bool, gaps: list[str]) -> None:
    assert unsealed(version, masking) == gaps
    assert landlock.scopes(version) == (landlock.SCOPES if version >= 6 else 0)


def _places(root: Path) -> Protected:
    return Protected(
        checkout=root / "repo",
        common_dir=root / "repo" / ".git",
        flow_dir=root / "repo" / ".flow",
        lanes_root=root / "repo.flowd",
        home=root / "home",
        secrets=(str(root / "home" / ".ssh"),),
    )


@pytest.mark.parametrize(
    ("rel", "what"),
    [
        ("repo/src/x.py", "checkout"),
        ("repo/.git/config", "gitConfig"),
        ("repo/.git/info/exclude", "gitConfig"),
        ("repo/.git/hooks/pre-commit", "gitHooks"),
        ("repo/.git/refs/heads/main", "gitRef"),
        ("repo/.git/packed-refs", "gitRef"),
        ("repo/.git/objects/ab/cdef", "gitObjects"),
        ("repo/.git/objects/info/alternates", "gitObjects"),
        ("repo/.git/objects/pack/pack-1.pack", "gitObjects"),
        ("repo/.git/worktrees/b/HEAD", "otherLane"),
        ("repo/.flow/config.toml", "flowState"),
        ("repo.flowd/ep/b/x", "otherLane"),
        ("home/.bashrc", "home"),
        ("home/.gitconfig", "gitConfig"),
        ("home/.ssh/id_rsa", "secret"),
        ("elsewhere/x", "outside"),
        ("repo.flowd/ep/a/own.txt", None),  # the lane's own
    ],
)
def test_what_kind_of_place_a_path_is(tmp_path: Path, rel: str, what: str | None) -> None:
    own = (tmp_path / "repo.flowd" / "ep" / "a",)
    assert what_is(str(tmp_path / rel), own, _places(tmp_path)) == what


def _confinement(root: Path) -> Confinement:
    (root / "repo.flowd" / "ep" / "a").mkdir(parents=True)
    (root / "repo.flowd" / "ep" / "a" / ".git").write_text("gitdir: /nowhere\n", encoding="utf-8")
    (root / "home").mkdir()
    return Confinement(
        "enforce", checkout=root / "repo", common_dir=root / "repo" / ".git",
        lanes_root=root / "repo.flowd", epic="ep", home=root / "home", version=7,
    )  # fmt: skip


def test_refusals_are_read_from_what_the_tools_print(tmp_path: Path) -> None:
    c = _confinement(tmp_path)
    cwd = tmp_path / "repo.flowd" / "ep" / "a"
    r, h = tmp_path / "repo", tmp_path / "home"
    output = "\n".join(
        [
            f"/bin/sh: 1: cannot create {r}/x.txt: Permission denied",
            f"error: could not lock config file {r}/.git/config: Permission denied",
            f"fatal: cannot lock ref 'refs/heads/main': Unable to create '{r}/.git/refs/heads/main.lock': "
            "Permission denied",
            f"PermissionError: [Errno 13] Permission denied: '{h}/.bashrc'",
            f"Error: EACCES: permission denied, open '{r}/n.txt'",
            f"ln: failed to create hard link 'own' => '{r}/README.md': Invalid cross-device link",
            "sh: 1: cannot create ../../../repo/up.txt: Permission denied",
            f"sh: 1: cannot create /proc/123/root{r}/root.txt: Permission denied",
            f"mktemp: failed to create file via template \u2018{h}/.pyenv/tmp.XX\u2019: Permission denied",
            f"all good in {r}/fine.txt",  # no refusal on this line
            "cannot create own.txt: Permission denied",  # the lane's own: not an escape
            # Landlock's scopes (docs/sandbox.md "Signals", "Abstract sockets"): EPERM.
            "bash: line 1: kill: (4242) - Operation not permitted",
            "/bin/sh: 1: kill: Operation not permitted",  # dash does not name the process
            "Error: kill EPERM",  # Node's process.kill
            '2026/01/01 socat[9] E connect(5, AF=1 "\\0/tmp/.X11-unix/X0", 20): Operation not permitted',
            "connect @dbus-abc: [Errno 1] Operation not permitted",
            f"touch: cannot touch '{r}/kill.txt': Operation not permitted",  # a file, not a signal
        ]
    )
    found = c.denials(output, cwd)
    assert found == [
        (f"{r}/x.txt", "checkout"),
        (f"{r}/.git/config", "gitConfig"),
        (f"{r}/.git/refs/heads/main", "gitRef"),
        (f"{h}/.bashrc", "home"),
        (f"{r}/n.txt", "checkout"),
        (f"{r}/README.md", "checkout"),
        (f"{r}/up.txt", "checkout"),
        (f"{r}/root.txt", "checkout"),
        (f"{h}/.pyenv/tmp.XX", "home"),  # coreutils' quotes in a UTF-8 locale
        ("pid 4242", "signal"),
        ("a process", "signal"),
        ("@/tmp/.X11-unix/X0", "socket"),
        ("@dbus-abc", "socket"),
        (f"{r}/kill.txt", "checkout"),
    ]


def test_a_kill_is_named_by_the_command_not_by_a_word_of_a_path(tmp_path: Path) -> None:
    c = _confinement(tmp_path)
    cwd = tmp_path / "repo.flowd" / "ep" / "a"
    assert c.denials("rm: cannot remove 'kill.txt': Operation not permitted", cwd) == []
    # dash names the script it runs (not a path the refusal names) and no process.
    assert c.denials("/tmp/x/gate.sh: 83: kill: Operation not permitted", cwd) == [("a process", "signal")]
    assert c.denials("/tmp/x/gate.sh: line 8: kill: (77) - Operation not permitted", cwd) == [
        ("pid 77", "signal")
    ]


def test_each_refusal_is_reported_once_per_origin(tmp_path: Path) -> None:
    told: list[tuple[str, str, str, str]] = []
    c = _confinement(tmp_path)
    c.report = lambda *args: told.append(args)
    cwd = tmp_path / "repo.flowd" / "ep" / "a"
    line = f"cannot create {tmp_path}/repo/x: Permission denied\n"
    for origin in ("its agent", "its agent", "`make test`"):
        c.scan(line, cwd, origin)
    assert [(lane, origin) for lane, _, _, origin in told] == [("a", "its agent"), ("a", "`make test`")]


def test_reads_cover_everything_but_the_secrets(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for rel in (".ssh/id_rsa", ".aws/credentials", ".config/gcloud/x", ".config/app/credentials",
                ".config/app/settings.json", ".docker/config.json", ".docker/buildx/x", "code/a.py", ".netrc"):  # fmt: skip
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("x", encoding="utf-8")
    (home / "ssh-link").symlink_to(home / ".ssh")

    def readable(rules: list[landlock.Rule], path: Path) -> bool:
        return any(
            (str(path) == r.path or str(path).startswith(r.path.rstrip("/") + "/"))
            and r.rights & landlock.READ_FILE
            for r in rules
        )

    rules = read_rules(home, [])
    for rel in ("code/a.py", ".config/app/settings.json", ".docker/buildx/x"):
        assert readable(rules, home / rel), rel
    for rel in (".ssh/id_rsa", ".aws/credentials", ".config/gcloud/x", ".config/app/credentials",
                ".docker/config.json", ".netrc"):  # fmt: skip
        assert not readable(rules, home / rel), rel
    assert readable(rules, Path("/usr/bin/env"))
    assert readable(read_rules(home, [home / ".aws"]), home / ".aws" / "credentials")  # allowRead


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["codex", "exec", "--json", "--sandbox", "workspace-write"], ["codex", "exec", "--json"]),
        (["codex", "exec", "-s", "read-only", "--json"], ["codex", "exec", "--json"]),
        (["codex", "exec", "--sandbox=workspace-write"], ["codex", "exec"]),
        (["codex", "exec"], ["codex", "exec"]),
    ],
)
def test_codex_runs_without_its_own_sandbox_inside_a_confined_lane(
    command: list[str], expected: list[str]
) -> None:
    from flowd.agents.cli_kind import build_argv, unsandboxed_codex

    assert unsandboxed_codex(command) == [*expected, "--sandbox", "danger-full-access"]
    confined = build_argv(command, model=None, confined=True)
    assert confined[-2:] == ["--sandbox", "danger-full-access"] and confined.count("--sandbox") == 1
    assert "danger-full-access" not in build_argv(command, model=None)  # unconfined: as the roster says


@pytest.mark.parametrize(
    ("setting", "version", "said"),
    [
        ("enforce", 7, None),
        ("enforce", 0, "sandbox: none available (detect): "),
        ("enforce", 1, "sandbox: landlock ABI 1 (detect): "),
        ("detect", 7, 'sandbox: detect ([sandbox] mode = "detect"): '),
        ("off", 7, 'sandbox: off ([sandbox] mode = "off"): '),
    ],
)
def test_a_run_says_once_when_it_does_not_enforce(
    tmp_path: Path, setting: str, version: int, said: str | None
) -> None:
    from flowd.engine.confinement import announcement
    from flowd.server.notify import notes_for
    from flowd.trace.view import RunView

    c = Confinement(
        setting,
        checkout=tmp_path,
        common_dir=tmp_path / ".git",
        lanes_root=tmp_path,
        epic="e",
        version=version,
    )
    info = announcement(c, setting)
    if said is None:
        assert info is None
        return
    assert info is not None and info.message.startswith(said)
    notes = notes_for(RunView(run_id="r"), info)
    assert [(n.params["reason"], n.params["actions"]) for n in notes] == [("unconfined", [])]
