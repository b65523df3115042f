from __future__ import annotations

from pathlib import Path

import pytest

from flowd.base.errors import FileProblems
from flowd.store.config import load_roster, load_settings


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_settings_default_when_absent(tmp_path: Path) -> None:
    settings = load_settings(tmp_path)
    assert settings.concurrency == 3 and settings.gates == []


def test_settings_read_camel_case_keys(tmp_path: Path) -> None:
    write(
        tmp_path / ".flow/config.toml",
        "concurrency = 2\ntaskConcurrency = 2\nbudgetUsd = 1.5\n"
        'timeZone = "Europe/Rome"\n[prices."my-model"]\ninput = 1.0\noutput = 2.0\n',
    )
    settings = load_settings(tmp_path)
    assert settings.task_concurrency == 2 and settings.budget_usd == 1.5
    assert settings.prices["my-model"].output == 2.0


def test_bad_settings_list_every_problem_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / ".flow/config.toml", 'concurrency = 0\nconcurency = 2\ntimeZone = "Mars/Base"\n')
    with pytest.raises(FileProblems) as caught:
        load_settings(tmp_path)
    message = str(caught.value)
    assert str(path) in message and "3 problems" in message
    assert "concurrency" in message and "concurency: unknown key" in message and "Mars/Base" in message


def test_broken_toml_is_one_sentence(tmp_path: Path) -> None:
    path = write(tmp_path / ".flow/config.toml", "concurrency = \n")
    with pytest.raises(FileProblems) as caught:
        load_settings(tmp_path)
    assert str(caught.value).startswith(f"{path}: is not valid TOML")
    assert "\n" not in str(caught.value)


def test_roster_merges_over_user_roster_by_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWD_TEST_KEY", "sekret")
    user = write(
        tmp_path / "user/roster.toml",
        '[[executors]]\nid = "claude"\nkind = "acp"\n'
        'command = ["claude-agent-acp"]\nslots = 1\nenv = { KEY = "${FLOWD_TEST_KEY}" }\n'
        '[[executors]]\nid = "old"\nkind = "acp"\ncommand = ["x"]\n',
    )
    write(tmp_path / "repo/.flow/demo.json", "{}")
    write(
        tmp_path / "repo/.flow/roster.toml",
        '[[executors]]\nid = "claude"\nslots = 3\n'
        '[[executors]]\nid = "old"\ndisabled = true\n'
        '[[executors]]\nid = "demo"\nkind = "script"\nscript = "demo.json"\nroles = ["coder"]\n',
    )
    roster = load_roster(tmp_path / "repo", user_path=user)
    assert [e.id for e in roster.executors] == ["claude", "demo"]
    claude = roster.get("claude")
    assert claude is not None and claude.slots == 3 and claude.command == ["claude-agent-acp"]
    assert claude.resolved_env == {"KEY": "sekret"}
    assert "sekret" not in claude.model_dump_json()
    demo = roster.get("demo")
    assert demo is not None and demo.script_path == (tmp_path / "repo/.flow/demo.json").resolve()


def test_bad_roster_lists_every_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWD_MISSING", raising=False)
    path = write(
        tmp_path / ".flow/roster.toml",
        '[[executors]]\nid = "a"\nkind = "acp"\n'
        '[[executors]]\nid = "b"\nkind = "openai"\nroles = ["coder"]\n'
        '[[executors]]\nid = "c"\nkind = "cli"\ncommand = ["c"]\nslots = 1\ncoderSlots = 2\n'
        'env = { K = "${FLOWD_MISSING}" }\n',
    )
    with pytest.raises(FileProblems) as caught:
        load_roster(tmp_path, user_path=tmp_path / "none.toml")
    message = str(caught.value)
    assert message.startswith(str(path))
    for part in (
        "executors[a].command",
        "executors[b].baseUrl",
        "executors[b].model",
        "executors[b].roles",
        "executors[c].coderSlots",
        "${FLOWD_MISSING}",
    ):
        assert part in message


def test_a_broken_script_is_a_roster_problem_before_anything_runs(tmp_path: Path) -> None:
    write(tmp_path / ".flow/bad.json", '{"rules": [{"when": {"role": "coder", "task": "("}}]}')
    path = write(
        tmp_path / ".flow/roster.toml", '[[executors]]\nid = "demo"\nkind = "script"\nscript = "bad.json"\n'
    )
    with pytest.raises(FileProblems) as caught:
        load_roster(tmp_path, user_path=tmp_path / "none.toml")
    message = str(caught.value)
    assert message.startswith(f"{path}: executors[demo].script: ")
    assert "rules[0].when.task: is not a valid regular expression" in message


def test_worktree_settings(tmp_path: Path) -> None:
    assert load_settings(tmp_path).worktree.model_dump() == {
        "include": ".worktreeinclude",
        "port_base": 41000,
        "ports_per_lane": 10,
        "sparse": False,
        "sparse_dirs": [],
        "keep_spares": 0,
        "spare_disk_budget_mb": 2048,
    }
    write(
        tmp_path / ".flow/config.toml",
        '[worktree]\ninclude = ".copyme"\nportBase = 5000\nportsPerLane = 4\nkeepSpares = 6\n'
        "spareDiskBudgetMb = 100\n",
    )
    worktree = load_settings(tmp_path).worktree
    got = (worktree.include, worktree.port_base, worktree.ports_per_lane, worktree.keep_spares)
    assert got == (".copyme", 5000, 4, 6) and worktree.spare_disk_budget_mb == 100
    # What the user wrote is known from what a big repository's run chooses (docs/repositories.md).
    assert worktree.model_fields_set == {
        "include",
        "port_base",
        "ports_per_lane",
        "keep_spares",
        "spare_disk_budget_mb",
    }


def test_bad_worktree_settings_name_each_field(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".flow/config.toml",
        '[worktree]\ninclude = "../outside"\nportBase = 70000\nportsPerLane = 0\nports = 3\nkeepSpares = -1\n',
    )
    with pytest.raises(FileProblems) as caught:
        load_settings(tmp_path)
    assert str(caught.value) == (
        f"{path} has 5 problems: "
        "worktree.include: '../outside' must name a file inside the repository, like '.worktreeinclude'; "
        "worktree.portBase: Input should be less than or equal to 65535; "
        "worktree.portsPerLane: Input should be greater than or equal to 1; "
        "worktree.keepSpares: Input should be greater than or equal to 0; "
        "worktree.ports: unknown key (check the spelling)"
    )


def test_sandbox_settings(tmp_path: Path) -> None:
    assert load_settings(tmp_path).sandbox.model_dump() == {
        "mode": "enforce",
        "allow_write": [],
        "allow_read": [],
    }
    write(
        tmp_path / ".flow/config.toml",
        '[sandbox]\nmode = "detect"\nallowWrite = ["~/.cache/build"]\nallowRead = ["/opt/keys"]\n',
    )
    sandbox = load_settings(tmp_path).sandbox
    assert (sandbox.mode, sandbox.allow_write, sandbox.allow_read) == (
        "detect",
        ["~/.cache/build"],
        ["/opt/keys"],
    )


def test_bad_sandbox_settings_name_each_field(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".flow/config.toml",
        '[sandbox]\nmode = "strict"\nallowWrite = [""]\nallowRead = "/opt"\nallow = []\n',
    )
    with pytest.raises(FileProblems) as caught:
        load_settings(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{path} has 4 problems: sandbox.mode: ")
    assert "'enforce', 'detect' or 'off'" in message
    assert "sandbox.allowWrite: '' must name a path, like '~/.cache/my-build' or '/opt/cache'" in message
    assert "sandbox.allowRead: " in message and "sandbox.allow: unknown key (check the spelling)" in message


def test_candidate_gates_on_the_cluster_need_ray_lanes(tmp_path: Path) -> None:
    path = write(tmp_path / ".flow/config.toml", '[lanes]\ncandidateGates = "cluster"\n')
    with pytest.raises(FileProblems) as caught:
        load_settings(tmp_path)
    assert str(caught.value) == (
        f'{path}: lanes.candidateGates: "cluster" needs engine = "ray" (the nodes are the lanes\' cluster)'
    )
    write(path, '[lanes]\nengine = "ray"\ncandidateGates = "cluster"\n')
    assert load_settings(tmp_path).lanes.candidate_gates == "cluster"
