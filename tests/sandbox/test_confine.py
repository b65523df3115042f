"""Confined processes on this machine's kernel: git works in the lane, the secrets stay hidden,
`allowRead`/`allowWrite` widen the policy, an agent program's own state stays writable, and the
binder fails closed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flowd.sandbox import landlock
from flowd.sandbox.bind import binder
from flowd.sandbox.confine import Confinement
from flowd.vcs import lane_repo
from flowd.vcs.gitcli import private_git_dir
from flowd.vcs.quarantine import take_in


@pytest.fixture
def lane(tmp_path: Path) -> Path:
    assert landlock.abi() >= 1, "these tests need the kernel's Landlock (Linux 5.13+, the LSM enabled)"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# r\n", encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    wt = tmp_path / "repo.flowd" / "ep" / "a"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/a", str(wt)], cwd=repo, check=True)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("SECRET\n", encoding="utf-8")
    return wt


def _confinement(
    wt: Path,
    setting: str = "enforce",
    allow_read: list[str] | None = None,
    allow_write: list[str] | None = None,
) -> Confinement:
    root = wt.parents[2]
    return Confinement(
        setting, checkout=root / "repo", common_dir=root / "repo" / ".git", lanes_root=root / "repo.flowd",
        epic="ep", home=root / "home", allow_read=allow_read or [], allow_write=allow_write or [],
    )  # fmt: skip


GIT_ID = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def _sh(
    c: Confinement, wt: Path, script: str, program: str | None = None, env: dict[str, str] | None = None
) -> str:
    with c.spawn(wt, program, env) as confined:
        done = subprocess.run(
            confined.argv(["/bin/sh", "-c", script]),
            cwd=wt,
            env={**os.environ, **GIT_ID, **(env or {}), **confined.env},
            pass_fds=confined.pass_fds,
            preexec_fn=confined.preexec_fn,
            capture_output=True,
            text=True,
        )
    return done.stdout + done.stderr


def test_git_works_on_the_lanes_own_branch(lane: Path) -> None:
    c = _confinement(lane)
    out = _sh(c, lane, "echo x > new.txt && git status --short && git add new.txt && git diff --cached --stat "
                       "&& git commit -q -m own && git log --format=%s -1 && echo tmp > $TMPDIR/t && echo OK")  # fmt: skip
    assert out.splitlines()[0] == "?? new.txt" and out.rstrip().endswith("own\nOK"), out
    repo = lane.parents[2] / "repo"
    # The commit is in the lane's own store and on its lane repository's branch until flowd takes
    # it in (docs/sandbox.md "The quarantine", "The lane repository").
    admin = repo / ".git" / "worktrees" / "a"
    assert take_in(repo / ".git", admin)
    assert lane_repo.take_branch(repo / ".git", admin, lane)
    log = subprocess.run(
        ["git", "log", "--format=%s", "story/ep/a"], cwd=repo, capture_output=True, text=True
    )
    assert log.stdout.split("\n")[0] == "own"


def test_secrets_hidden_unless_allow_read(lane: Path) -> None:
    home = lane.parents[2] / "home"
    script = f"cat {home}/.ssh/id_ed25519"
    assert "Permission denied" in _sh(_confinement(lane), lane, script)
    assert _sh(_confinement(lane, allow_read=[str(home / ".ssh")]), lane, script) == "SECRET\n"


def test_allow_write_widens_the_policy(lane: Path) -> None:
    shared = lane.parents[2] / "build-cache"
    shared.mkdir()
    script = f"echo x > {shared}/o && echo wrote"
    assert "Permission denied" in _sh(_confinement(lane), lane, script)
    assert _sh(_confinement(lane, allow_write=[str(shared)]), lane, script) == "wrote\n"


def test_a_checkout_said_sealed_is_one_no_lane_process_can_write(lane: Path) -> None:
    """`seals` is what detection trusts to stop scanning the user's checkout: checked against the
    kernel. Sealed: a confined write there is refused. An `allowWrite` inside it (or above it), or
    a mode that does not enforce: not sealed, and the write lands."""
    repo = lane.parents[2] / "repo"
    (repo / "build").mkdir()
    sealed = _confinement(lane)
    assert sealed.seals(repo)
    assert "Permission denied" in _sh(sealed, lane, f"echo x > {repo}/LANDED.txt")
    assert not (repo / "LANDED.txt").exists()
    inside = _confinement(lane, allow_write=["build"])
    assert not inside.seals(repo) and not _confinement(lane, allow_write=[str(repo.parent)]).seals(repo)
    assert _sh(inside, lane, f"echo x > {repo}/build/o && echo wrote") == "wrote\n"
    assert not _confinement(lane, "detect").seals(repo)


def test_an_agent_programs_own_state_stays_writable(lane: Path) -> None:
    config = lane.parents[2] / "claude-config"
    script = f"echo s > {config}/state.json && echo wrote"
    env = {"CLAUDE_CONFIG_DIR": str(config)}
    assert _sh(_confinement(lane), lane, script, "claude-agent-acp", env) == "wrote\n"  # made for it
    assert "Permission denied" in _sh(_confinement(lane), lane, f"echo s > {config}/state.json", None, env)


def test_off_and_detect_confine_nothing(lane: Path) -> None:
    target = lane.parents[2] / "repo" / "LANDED.txt"
    for setting in ("off", "detect"):
        _sh(_confinement(lane, setting), lane, f"echo x > {target}")
        assert target.exists()
        target.unlink()


def test_the_binder_fails_closed() -> None:
    path = binder()
    assert path is not None, "x86-64 has a binder"
    bad = subprocess.run([path, "999", "/bin/true", "true"], capture_output=True, text=True)
    assert bad.returncode == 126 and "landlock_restrict_self failed" in bad.stderr
    assert subprocess.run([path, "1"], capture_output=True).returncode == 126  # too few arguments


def test_without_the_binder_the_child_binds_in_a_preexec_fn(
    lane: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other architectures than x86-64 have no binder: the same policy, bound between fork and exec."""
    import flowd.sandbox.confine as confine

    monkeypatch.setattr(confine, "binder", lambda: None)
    c = _confinement(lane)
    with c.spawn(lane) as confined:
        assert confined.prefix == () and confined.preexec_fn is not None
    target = lane.parents[2] / "repo" / "x.txt"
    out = _sh(c, lane, f"echo x > {target}; echo own > own.txt && echo wrote")
    assert "Permission denied" in out and out.startswith("wrote\n") and not target.exists()  # stdout first


def test_a_merge_train_candidate_is_a_lane_of_its_own(lane: Path) -> None:
    """The epic gates run in a candidate worktree (`<epic>/_train/w<n>/_epic`, docs/merging.md):
    they write there, and still nowhere else."""
    repo = lane.parents[2] / "repo"
    candidate = lane.parents[1] / "ep" / "_train" / "w1" / "_epic"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(candidate)], cwd=repo, check=True)
    c = _confinement(lane)
    assert c.lane_top(candidate / "sub") == candidate
    out = _sh(c, candidate, f"echo ok > built.txt && cat built.txt; echo x > {lane}/INTRUDER.txt")
    assert (candidate / "built.txt").read_text(encoding="utf-8") == "ok\n"
    assert not (lane / "INTRUDER.txt").exists(), out


def test_a_process_where_no_lane_is_gets_a_temp_folder_the_runs_end_removes(lane: Path) -> None:
    """A story worktree deleted by hand mid-run: an agent started there is a process of no lane.
    It is given a private temp folder (and may write nowhere else); the run's end removes it with
    what the process left there, so runs leave nothing in the system temp folder."""
    shutil.rmtree(lane)
    lane.mkdir()  # the agent's folder, as the run would find it: no longer a worktree
    c = _confinement(lane)
    assert c.lane_top(lane) is None
    out = _sh(c, lane, 'echo left > "$TMPDIR/tool.log" && echo "$TMPDIR"; echo x > here.txt')
    temp = Path(out.splitlines()[0])
    assert (temp / "tool.log").read_text(encoding="utf-8") == "left\n", out
    assert not (lane / "here.txt").exists(), out
    assert _sh(c, lane, 'echo "$TMPDIR"').splitlines()[0] == str(temp)  # one folder per run
    c.close()
    assert not temp.exists()
    c.close()  # twice: nothing more to do


def test_a_worktree_made_again_at_its_path_is_a_new_lane(lane: Path) -> None:
    """Landlock binds a rule to the directory, not its name: a worktree removed and added again
    at the same path (a Ray lane placed again) is a new key, so no process confined to the old
    directory is handed the new one (it could not write there)."""
    repo = lane.parents[2] / "repo"
    c = _confinement(lane)
    before = c.key_for(lane / "sub")
    assert before is not None and before.startswith(f"{lane}@")
    with c.spawn(lane) as confined:
        old = subprocess.Popen(
            confined.argv(["/bin/sh", "-c", "read line; echo x > new.txt && echo wrote"]),
            cwd=lane, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **confined.env}, pass_fds=confined.pass_fds, preexec_fn=confined.preexec_fn,
        )  # fmt: skip
    lane_repo.before_worktree_command(lane)  # as flowd's own removal does: git checks `.git`
    subprocess.run(["git", "worktree", "remove", "--force", str(lane)], cwd=repo, check=True)
    subprocess.run(["git", "worktree", "add", "-q", str(lane), "story/ep/a"], cwd=repo, check=True)
    out, _ = old.communicate("go\n", timeout=30)
    assert "wrote" not in out and not (lane / "new.txt").exists(), out  # the old process: refused
    assert c.key_for(lane) not in (None, before)
    assert _sh(c, lane, "echo x > new.txt && echo wrote").strip() == "wrote"  # a new one: fine


def test_a_refusal_told_in_an_agents_tool_output_is_named(lane: Path) -> None:
    """A real agent's shell tool reports what it printed in its ACP tool-call update, not on the
    agent's stderr: the OS's refusal there is found as on stderr."""
    from acp.schema import ToolCallProgress

    from flowd.agents.acp_turn import tool_output_text

    reported: list[tuple[str, str, str, str]] = []
    c = _confinement(lane)
    c.report = lambda *told: reported.append(told)
    repo = lane.parents[2] / "repo"
    printed = _sh(
        c, lane, f"echo x > {repo}/ESCAPED.txt; git config -f {repo}/.git/config core.hooksPath /tmp/h"
    )
    assert not (repo / "ESCAPED.txt").exists() and "denied" in printed.lower(), printed
    # As the agents send them on the wire: claude's `rawOutput`, gemini's text content.
    for wire in (
        {"sessionUpdate": "tool_call_update", "toolCallId": "1", "status": "failed",
         "rawOutput": {"output": printed, "exit_code": 1}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "2", "status": "completed",
         "content": [{"type": "content", "content": {"type": "text", "text": printed}}]},
    ):  # fmt: skip
        update = ToolCallProgress.model_validate(wire)
        c.scan(tool_output_text(update), lane, "its agent claude")
    assert sorted((r[1], r[2]) for r in reported) == [
        (str(repo / ".git" / "config"), "gitConfig"),
        (str(repo / "ESCAPED.txt"), "checkout"),
    ]  # each once: the second update says nothing new
    assert {r[0] for r in reported} == {"a"}


def test_a_reused_worktree_is_confined_to_its_new_lane_only(lane: Path) -> None:
    """A finished lane's worktree reused by the next story (docs/repositories.md "Worktree
    reuse") is moved to the new story's name: the process key (path and directory) changes, so
    no process confined to the old lane is handed the new one; the new story's processes write
    and commit there, and not under the old name, where a new directory is another key again."""
    from flowd.engine.spares import Spares
    from flowd.vcs.gitops import Repo

    repo = Repo(lane.parents[2] / "repo")
    c = _confinement(lane)
    old_key = c.key_for(lane)
    spares = Spares(repo, lane.parent)
    assert spares.give(lane) is None and not lane.exists()
    b = lane.parent / "b"
    assert spares.take(b, "story/ep/b", "main") == "reused"
    assert c.key_for(b) not in (None, old_key)
    assert spares.take(lane, "story/ep/a2", "main") == "added"  # a new directory at the old name
    assert c.key_for(lane) not in (None, old_key, c.key_for(b))
    out = _sh(c, b, f"echo x > new.txt && git add new.txt && git commit -q -m own && echo OK; echo y > {lane}/INTRUDER.txt")  # fmt: skip
    assert "OK" in out and (b / "new.txt").is_file(), out
    assert not (lane / "INTRUDER.txt").exists(), out
    admin = private_git_dir(b)
    assert admin is not None and take_in(repo.common_dir, admin)  # taken in, as flowd does after a step
    assert lane_repo.take_branch(repo.common_dir, admin, b)
    log = subprocess.run(["git", "log", "--format=%s", "-1", "story/ep/b"], cwd=repo.root, capture_output=True, text=True)  # fmt: skip
    assert log.stdout.strip() == "own"


def test_a_git_file_naming_another_lanes_admin_dir_widens_nothing(lane: Path) -> None:
    """The lane's `.git` file is the lane's to write: pointed at another lane's admin dir, its
    next process still may write only its own (found from the repository's side)."""
    repo = lane.parents[2] / "repo"
    other = lane.parent / "b"
    subprocess.run(["git", "worktree", "add", "-q", "-b", "story/ep/b", str(other)], cwd=repo, check=True)
    victim = repo / ".git" / "worktrees" / "b"
    (lane / ".git").write_text(f"gitdir: {victim}\n", encoding="utf-8")
    c = _confinement(lane)
    out = _sh(c, lane, f"echo x > {victim}/planted; echo x > $TMPDIR/own && echo OWN")
    assert not (victim / "planted").exists(), out
    assert "OWN" in out and (repo / ".git" / "worktrees" / "a" / "flowd-tmp" / "own").exists()


@pytest.mark.parametrize("place", ["flowd-tmp", "flowd-cache", "flowd-objects", "flowd-git"])
def test_a_folder_of_the_lanes_own_cannot_be_replaced_by_a_link(lane: Path, place: str) -> None:
    # The lane's own temp, cache, object and git folders lie in its admin dir, which is flowd's:
    # the lane may write in them, not replace one with a link to the user's checkout for its next
    # process to write through (docs/sandbox.md "Links a lane planted").
    told: list[tuple[str, str, str, str]] = []
    c = _confinement(lane)
    c.report = lambda *args: told.append(args)
    repo = lane.parents[2] / "repo"
    admin = repo / ".git" / "worktrees" / "a"
    _sh(c, lane, "echo warm-up")
    out = _sh(
        c, lane, f'rm -rf "{admin}/{place}"; ln -s {repo} "{admin}/{place}"; mv "{admin}/{place}" "{admin}/x"'
    )
    assert "Permission denied" in out or "Operation not permitted" in out, out
    assert not (admin / place).is_symlink() and (admin / place).is_dir() and not (admin / "x").exists()
    out = _sh(c, lane, f'echo x > "{admin}/{place}/LINKED.txt"; echo x > "$TMPDIR/T.txt"; echo "$TMPDIR"')
    assert not (repo / "LINKED.txt").exists() and not (repo / "T.txt").exists(), out
    assert told == []


def test_a_write_rule_is_not_granted_through_a_link(lane: Path, tmp_path: Path) -> None:
    # Planted between flowd's check and the rules being built: the rule opens no link, last part
    # or parent, and grants nothing (the read rules still follow links: `follow` True).
    outside, linked = tmp_path / "outside", tmp_path / "linked"
    (outside / "in").mkdir(parents=True)
    linked.symlink_to(outside)
    rules = [
        landlock.Rule("/", landlock.READ),
        landlock.Rule(str(linked), landlock.WRITE | landlock.READ, follow=False),
        landlock.Rule(str(linked / "in"), landlock.WRITE | landlock.READ, follow=False),
        landlock.Rule("/dev/null", landlock.WRITE | landlock.READ),
    ]
    ruleset = landlock.build(rules, landlock.abi())
    try:
        assert ruleset.skipped == [str(linked), str(linked / "in")]
        done = subprocess.run(
            ["/bin/sh", "-c", f"echo x > {outside}/a.txt; echo x > {outside}/in/b.txt"],
            preexec_fn=ruleset.binder(),
            capture_output=True,
            text=True,
        )
    finally:
        ruleset.close()
    assert not (outside / "a.txt").exists() and not (outside / "in" / "b.txt").exists(), done.stderr
    assert done.stderr.count("Permission denied") == 2, done.stderr


def test_a_process_of_no_lane_cannot_link_its_cache_folder_outside(lane: Path) -> None:
    # The folder of a process started where no lane is holds its caches: relinked to the
    # user's checkout by one process, it is made anew before the next, which writes nothing there.
    shutil.rmtree(lane)
    lane.mkdir()
    c = _confinement(lane)
    repo = lane.parents[2] / "repo"
    before = sorted(p.name for p in repo.iterdir())
    temp = Path(_sh(c, lane, 'echo "$TMPDIR"').splitlines()[0])
    _sh(c, lane, f'rm -rf "$TMPDIR/flowd-cache"; ln -s {repo} "$TMPDIR/flowd-cache"')
    out = _sh(
        c, lane, 'mkdir -p "$PIP_CACHE_DIR" && echo x > "$PIP_CACHE_DIR/../X.txt"; echo "$PIP_CACHE_DIR"'
    )
    assert sorted(p.name for p in repo.iterdir()) == before, out
    assert not (temp / "flowd-cache").is_symlink()
    c.close()
