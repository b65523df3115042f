"""flowd's own git never follows a lane (docs/sandbox.md "flowd's own git"): pinned to the git dir
flowd finds itself, with every setting that could start a command sealed, and a lane's admin
files checked as data (`flowd/vcs/admin.py`). Real repositories in temp dirs; each attack plants a
command that would leave a marker file if anything ran it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flowd.vcs import gitcli
from flowd.vcs.admin import check_admin, check_candidate
from flowd.vcs.gitcli import GitDirChanged, git_env, pin_of, run_git
from flowd.vcs.gitops import Repo
from tests.test_gitops import git, make_repo, no_user_config  # noqa: F401 (the fixture)


@pytest.fixture
def lane(tmp_path: Path) -> tuple[Repo, Path, Path]:
    """A repository flowd works on, one story worktree on `story/e/s1`, and its admin dir."""
    repo = Repo(make_repo(tmp_path / "repo"))
    wt = repo.worktree_add(tmp_path / "lanes" / "e" / "s1", "story/e/s1", "main")
    return repo, wt, repo.common_dir / "worktrees" / "s1"


def marker_command(tmp_path: Path) -> tuple[str, Path]:
    marker = tmp_path / "RAN"
    return f"touch {marker}; false", marker


def evil_copy(repo: Repo, tmp_path: Path, key: str, value: str) -> Path:
    """A copy of the repository's git dir (where a lane could write) whose config sets `key`."""
    evil = tmp_path / "evil"
    shutil.copytree(repo.common_dir, evil, symlinks=True)
    git(evil, "--git-dir", str(evil), "config", key, value)
    return evil


def test_commondir_pointing_at_a_config_with_fsmonitor_runs_nothing(lane, tmp_path: Path) -> None:
    repo, wt, admin = lane
    command, marker = marker_command(tmp_path)
    evil = evil_copy(repo, tmp_path, "core.fsmonitor", command)
    (admin / "commondir").write_text(f"{evil}\n")
    (wt / "new.txt").write_text("x\n")
    # What an unpinned git does with it: the attack is real.
    subprocess.run(["git", "status", "--porcelain"], cwd=wt, capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()
    assert "new.txt" in repo.status_paths(wt)
    repo.commit_all(wt, "work")
    assert not marker.exists()
    problems = check_admin(repo.common_dir, wt)
    assert [(p.path, p.put_back) for p in problems] == [(admin / "commondir", True)]
    assert (admin / "commondir").read_text() == "../..\n"
    assert check_admin(repo.common_dir, wt) == []


def test_dotgit_file_pointing_elsewhere_is_not_followed_and_put_back(lane, tmp_path: Path) -> None:
    repo, wt, admin = lane
    command, marker = marker_command(tmp_path)
    evil = evil_copy(repo, tmp_path, "core.fsmonitor", command)
    (wt / ".git").write_text(f"gitdir: {evil / 'worktrees' / 's1'}\n")
    (wt / "new.txt").write_text("x\n")
    pin = pin_of(wt)
    assert pin is not None and pin.git_dir == admin and pin.common_dir == repo.common_dir
    assert "new.txt" in repo.status_paths(wt)
    assert not marker.exists()
    problems = check_admin(repo.common_dir, wt)
    assert [(p.path, p.put_back) for p in problems] == [(wt / ".git", True)]
    assert (wt / ".git").read_text() == f"gitdir: {admin}\n"


def test_gitdir_rewritten_leaves_flowd_on_the_admin_dir_it_knew(lane, tmp_path: Path) -> None:
    repo, wt, admin = lane
    assert pin_of(wt) is not None  # flowd has met the worktree
    (admin / "gitdir").write_text(f"{tmp_path / 'elsewhere' / '.git'}\n")
    pin = pin_of(wt)
    assert pin is not None and pin.git_dir == admin
    assert [p.put_back for p in check_admin(repo.common_dir, wt)] == [True]
    assert (admin / "gitdir").read_text() == f"{wt.resolve() / '.git'}\n"


def test_a_worktree_no_admin_dir_names_runs_no_git(lane, tmp_path: Path) -> None:
    repo, _wt, admin = lane
    other = repo.worktree_add(tmp_path / "lanes" / "e" / "s2", "story/e/s2", "main")
    (other / ".git").write_text(f"gitdir: {admin}\n")  # s2 claims s1's admin dir
    (repo.common_dir / "worktrees" / "s2" / "gitdir").write_text("/nowhere/.git\n")
    gitcli._ADMINS.pop(str(other.resolve()), None)  # a flowd that never met it (a resumed run)
    with pytest.raises(GitDirChanged, match="gitDir"):
        run_git(other, ["status"], "status")
    assert [p.put_back for p in check_admin(repo.common_dir, other)] == [False]


def test_an_admin_dir_name_git_gave_again_is_never_taken_back_from_its_worktree(tmp_path: Path) -> None:
    """A merge-train slot made anew gets another admin dir, and git may give the name flowd knew
    for it to another worktree. When the slot's new `gitdir` is rewritten, flowd must not take
    that other worktree's admin dir for the slot's (writing its `gitdir` back would steal it): no
    admin dir names the slot, its git runs nowhere, and the other worktree keeps its own."""
    repo = Repo(make_repo(tmp_path / "repo"))
    slot, other = tmp_path / "lanes" / "w1" / "_epic", tmp_path / "lanes" / "w2" / "_epic"
    repo.worktree_add_detached(slot, "main")
    first = pin_of(slot)
    assert first is not None  # flowd has met the slot under its first admin dir
    repo.worktree_remove(slot, force=True)
    repo.worktree_add_detached(other, "main")
    assert pin_of(other) is not None and pin_of(other).git_dir == first.git_dir  # the name, again
    repo.worktree_add_detached(slot, "main")
    again = pin_of(slot)
    assert again is not None and again.git_dir != first.git_dir
    (again.git_dir / "gitdir").write_text(f"{other.resolve() / '.git'}\n")  # a gate's rewrite
    gitcli._ADMINS[str(slot.resolve())] = first.git_dir  # flowd met the slot before the re-add only
    with pytest.raises(GitDirChanged, match="gitDir"):
        run_git(slot, ["status"], "status")
    assert [p.put_back for p in check_admin(repo.common_dir, slot)] == [False]
    assert (first.git_dir / "gitdir").read_text() == f"{other.resolve() / '.git'}\n"
    assert run_git(other, ["rev-parse", "--absolute-git-dir"], "git dir").stdout.strip() == str(first.git_dir)


def test_head_naming_the_users_branch_is_put_back(lane) -> None:
    repo, wt, admin = lane
    (admin / "HEAD").write_text("ref: refs/heads/main\n")
    problems = check_admin(repo.common_dir, wt, head="ref: refs/heads/story/e/s1")
    assert [(p.path, p.put_back) for p in problems] == [(admin / "HEAD", True)]
    assert (admin / "HEAD").read_text() == "ref: refs/heads/story/e/s1\n"


def test_index_and_reflog_links_are_removed_and_never_written_through(lane, tmp_path: Path) -> None:
    repo, wt, admin = lane
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's\n")
    (admin / "index").unlink()
    (admin / "index").symlink_to(victim)
    (admin / "logs").mkdir(exist_ok=True)
    (admin / "logs" / "HEAD").unlink(missing_ok=True)
    (admin / "logs" / "HEAD").symlink_to(victim)
    problems = check_admin(repo.common_dir, wt)
    assert sorted((p.path.name, p.put_back) for p in problems) == [("HEAD", True), ("index", True)]
    (wt / "f.txt").write_text("work\n")
    repo.commit_all(wt, "work")
    assert victim.read_text() == "the user's\n"
    assert not (admin / "index").is_symlink()


def test_worktree_config_with_an_include_is_cut_back_to_gits_own(lane, tmp_path: Path) -> None:
    """flowd turns on git's per-worktree config for sparse lanes (vcs/sparse.py): the lane's
    `config.worktree` is then read by flowd's git too, and an include there brings a filter driver
    the lane's `.gitattributes` selects."""
    repo, wt, admin = lane
    command, marker = marker_command(tmp_path)
    git(repo.root, "config", "extensions.worktreeConfig", "true")
    planted = tmp_path / "planted.config"
    planted.write_text(f'[filter "evil"]\n\tclean = {command}\n')
    (admin / "config.worktree").write_text(
        f"[core]\n\tsparseCheckout = false\n[include]\n\tpath = {planted}\n"
    )
    (wt / ".gitattributes").write_text("*.txt filter=evil\n")
    (wt / "f.txt").write_text("work\n")
    subprocess.run(["git", "add", "f.txt"], cwd=wt, env=git_env(), capture_output=True, check=False)
    assert marker.exists()  # what flowd's git would do without the check
    marker.unlink()
    subprocess.run(["git", "reset", "-q"], cwd=wt, env=git_env(), capture_output=True, check=False)
    problems = check_admin(repo.common_dir, wt)
    assert [(p.path.name, p.put_back) for p in problems] == [("config.worktree", True)]
    assert (admin / "config.worktree").read_text() == '[core]\n\tsparsecheckout = "false"\n'
    repo.commit_all(wt, "work")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("key", "act"),
    [
        ("core.fsmonitor", "status"),
        ("diff.external", "diff"),
        ("commit.gpgSign", "commit"),
        ("log.showSignature", "log"),
    ],
)
def test_settings_that_start_a_command_are_sealed(lane, tmp_path: Path, key: str, act: str) -> None:
    """Even in a config flowd's git does read (the repository's own, where `include.path` or a
    later git could bring a lane's), nothing runs: the command-scope settings win."""
    repo, wt, _admin = lane
    command, marker = marker_command(tmp_path)
    script = tmp_path / "prog.sh"
    script.write_text(f"#!/bin/sh\n{command}\n")
    script.chmod(0o755)
    if key == "commit.gpgSign":
        git(repo.root, "config", "gpg.program", str(script))
        git(repo.root, "config", key, "true")
    elif key == "log.showSignature":
        git(repo.root, "config", "gpg.program", str(script))
        git(repo.root, "config", key, "true")
        signed_commit_on_top(wt)
    else:
        git(repo.root, "config", key, str(script))
    (wt / "README.md").write_text("changed\n")
    if act == "status":
        repo.status_paths(wt)
    elif act == "diff":
        repo.diff(wt, "main")
    elif act == "commit":
        repo.commit_all(wt, "work")
    else:
        repo.subjects_since(wt, "main")
    assert not marker.exists()
    # Without the sealed settings the same command does run (the test can fail).
    env = {k: v for k, v in git_env().items() if not k.startswith("GIT_CONFIG_")}
    args = {
        "status": ["status"],
        "diff": ["diff"],
        "commit": ["-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-a", "-m", "x"],
        "log": ["log", "-1"],
    }[act]
    (wt / "README.md").write_text("changed again\n")
    subprocess.run(["git", *args], cwd=wt, env=env, capture_output=True, check=False)
    assert marker.exists()


def signed_commit_on_top(wt: Path) -> None:
    """A commit carrying a (meaningless) signature on the worktree's branch: `log` with
    `log.showSignature` hands it to `gpg.program`."""
    tree = git(wt, "rev-parse", "HEAD^{tree}").strip()
    parent = git(wt, "rev-parse", "HEAD").strip()
    body = (
        f"tree {tree}\nparent {parent}\nauthor T <t@e> 1700000000 +0000\n"
        "committer T <t@e> 1700000000 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    sha = subprocess.run(
        ["git", "hash-object", "-w", "-t", "commit", "--stdin"],
        cwd=wt,
        input=body,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git(wt, "update-ref", "HEAD", sha)


def test_external_diff_from_the_environment_is_dropped(lane, tmp_path: Path, monkeypatch) -> None:
    repo, wt, _admin = lane
    command, marker = marker_command(tmp_path)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", command)
    (wt / "README.md").write_text("changed\n")
    assert "changed" in repo.diff(wt, "main")
    assert not marker.exists()


def test_the_checkout_itself_is_pinned(lane) -> None:
    repo, _wt, _admin = lane
    pin = pin_of(repo.root)
    assert pin is not None and pin.work_tree == repo.root and pin.git_dir == repo.git_dir
    assert os.path.samefile(pin.common_dir, repo.common_dir)


def test_a_signature_check_on_merge_runs_no_gpg_program(lane, tmp_path: Path) -> None:
    """`merge.verifySignatures` in the repository's config would hand the merged commit (a lane's)
    to `gpg.program`: flowd's merges never check."""
    repo, wt, _admin = lane
    command, marker = marker_command(tmp_path)
    script = tmp_path / "prog.sh"
    script.write_text(f"#!/bin/sh\n{command}\n")
    script.chmod(0o755)
    other = repo.worktree_add(tmp_path / "lanes" / "e" / "s2", "story/e/s2", "main")
    signed_commit_on_top(other)
    git(repo.root, "config", "gpg.program", str(script))
    git(repo.root, "config", "merge.verifySignatures", "true")
    repo.merge(wt, "story/e/s2", "merge s2")
    assert not marker.exists()
    env = {k: v for k, v in git_env().items() if not k.startswith("GIT_CONFIG_")}
    git(wt, "reset", "-q", "--hard", "HEAD^")
    subprocess.run(
        ["git", "merge", "--no-edit", "story/e/s2"], cwd=wt, env=env, capture_output=True, check=False
    )
    assert marker.exists()


def test_an_ext_url_runs_nothing_even_where_the_config_allows_it(lane, tmp_path: Path) -> None:
    """`ext::` URLs run a command; a `.gitmodules` is the lane's to write."""
    repo, wt, _admin = lane
    _command, marker = marker_command(tmp_path)
    git(repo.root, "config", "protocol.ext.allow", "always")
    url = f"ext::sh -c touch% {marker}"
    proc = run_git(wt, ["ls-remote", url], "ls-remote", ok_codes=range(256))
    assert proc.returncode != 0 and not marker.exists()
    env = {k: v for k, v in git_env().items() if not k.startswith("GIT_CONFIG_")}
    subprocess.run(["git", "ls-remote", url], cwd=wt, env=env, capture_output=True, check=False)
    assert marker.exists()


def test_flowds_git_ignores_an_object_store_its_environment_names(lane, tmp_path: Path, monkeypatch) -> None:
    repo, wt, _admin = lane
    elsewhere = tmp_path / "objects-elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(elsewhere))
    (wt / "f.txt").write_text("work\n")
    repo.commit_all(wt, "work")
    assert list(elsewhere.iterdir()) == []


def test_a_submodules_git_dir_and_config_are_checked_too(tmp_path: Path) -> None:
    """A submodule's git dir lives in the lane's admin dir (`modules/<name>`), its `config` too,
    and flowd's own git runs in the submodule (a reused worktree's scrub, `git status` looking
    in): a filter driver planted there, or the submodule's `.git` pointed at another git dir,
    is cut back before flowd's git could run it."""
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "u.txt").write_text("u\n")
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "u")
    root = make_repo(tmp_path / "repo")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "libs/sub")
    git(root, "commit", "-q", "-m", "sub")
    repo = Repo(root)
    wt = repo.worktree_add(tmp_path / "lanes" / "e" / "s1", "story/e/s1", "main")
    admin = repo.common_dir / "worktrees" / "s1"
    module = admin / "modules" / "libs" / "sub"
    assert (module / "config").is_file()
    command, marker = marker_command(tmp_path)
    with (module / "config").open("a") as handle:
        handle.write(f'[filter "evil"]\n\tclean = {command}\n\tsmudge = {command}\n')
    (wt / "libs" / "sub" / ".gitattributes").write_text("*.txt filter=evil\n")
    (wt / "libs" / "sub" / "u.txt").write_text("changed\n")
    elsewhere = tmp_path / "elsewhere-git"
    shutil.copytree(module, elsewhere, symlinks=True)
    (wt / "libs" / "sub" / ".git").write_text(f"gitdir: {elsewhere}\n")
    problems = check_admin(repo.common_dir, wt)
    assert sorted((p.path.name, p.put_back) for p in problems) == [(".git", True), ("config", True)]
    assert "evil" not in (module / "config").read_text()
    assert "worktree" in (module / "config").read_text() and "url" in (module / "config").read_text()
    run_git(wt / "libs" / "sub", ["add", "-A"], "add in the submodule")
    run_git(wt / "libs" / "sub", ["status", "--porcelain"], "status in the submodule")
    assert not marker.exists()
    assert check_admin(repo.common_dir, wt) == []


def test_pointers_git_writes_relative_are_the_same_place(lane) -> None:
    """git 2.48's `worktree.useRelativePaths` writes `.git` and `gitdir` relative: the same place,
    no `gitDir` problem, still pinned."""
    repo, wt, admin = lane
    real = wt.resolve()
    (real / ".git").write_text(f"gitdir: {os.path.relpath(admin, real)}\n")
    (admin / "gitdir").write_text(f"{os.path.relpath(real / '.git', admin)}\n")
    gitcli._ADMINS.clear()
    assert check_admin(repo.common_dir, wt) == []
    pin = pin_of(wt)
    assert pin is not None and pin.git_dir == admin


def test_a_textconv_driver_the_lanes_attributes_select_runs_not_for_flowds_diff(lane, tmp_path: Path) -> None:
    repo, wt, _admin = lane
    command, marker = marker_command(tmp_path)
    git(repo.root, "config", "diff.evil.textconv", f"sh -c '{command}'")
    (wt / ".gitattributes").write_text("*.md diff=evil\n")
    (wt / "README.md").write_text("changed\n")
    assert "changed" in repo.diff(wt, "main")
    assert not marker.exists()
    env = {k: v for k, v in git_env().items() if not k.startswith("GIT_CONFIG_")}
    subprocess.run(["git", "diff", "HEAD"], cwd=wt, env=env, capture_output=True, check=False)
    assert marker.exists()


def test_core_ssh_command_from_a_config_is_not_what_flowds_git_runs(lane, tmp_path: Path) -> None:
    repo, wt, _admin = lane
    _command, marker = marker_command(tmp_path)
    script = tmp_path / "ssh.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(0o755)
    git(repo.root, "config", "core.sshCommand", str(script))
    url = "ssh://nobody@flowd.invalid/x.git"
    run_git(wt, ["ls-remote", url], "ls-remote", ok_codes=range(256))
    assert not marker.exists()
    env = {k: v for k, v in git_env().items() if k != "GIT_SSH_COMMAND"}
    subprocess.run(["git", "ls-remote", url], cwd=wt, env=env, capture_output=True, check=False)
    assert marker.exists()


def test_a_candidates_head_naming_no_object_is_put_back_and_its_objects_thrown_away(lane) -> None:
    """A merge-train candidate after its gates (flowd/vcs/admin.py `check_candidate`): a `HEAD`
    naming a commit the repository does not hold is put back at the candidate's tip, the
    quarantine (a blob a gate's `git add` wrote) is thrown away, and the index, which named that
    blob, is read from `HEAD` again: the repository's `git fsck` finds nothing missing."""
    repo, wt, admin = lane
    tip = git(wt, "rev-parse", "HEAD").strip()
    git(wt, "checkout", "-q", "--detach")
    q = admin / "flowd-objects"
    q.mkdir()
    store = {
        "GIT_OBJECT_DIRECTORY": str(q),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repo.common_dir / "objects"),
    }
    (wt / "gate.txt").write_text("written by a gate\n")
    subprocess.run(["git", "add", "gate.txt"], cwd=wt, env={**os.environ, **store}, check=True)
    (admin / "HEAD").write_text("f" * 40 + "\n")
    assert (
        subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo.root, capture_output=True).returncode != 0
    )
    found = check_candidate(repo.common_dir, wt, tip)
    assert [(p.path.name, p.what, p.put_back) for p in found] == [
        ("flowd-objects", None, True), ("HEAD", "gitObjects", True)
    ], found  # fmt: skip
    assert (admin / "HEAD").read_text() == tip + "\n" and not q.exists()
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo.root, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    staged = subprocess.run(
        ["git", "diff-index", "--cached", "--name-only", "HEAD"], cwd=wt, capture_output=True, text=True
    )
    assert staged.returncode == 0 and staged.stdout == "", staged.stdout  # the index is HEAD's again
    assert check_candidate(repo.common_dir, wt, tip) == []
