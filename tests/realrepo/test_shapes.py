"""Shapes real repositories have (docs/repositories.md), each run as an epic on real git: line-ending
rules, a user's hooks that reject commits, a default branch other than `main`, a shallow clone,
Git LFS set up without git-lfs, paths with spaces and non-ASCII letters, a user on a feature
branch of a `master` repository with uncommitted work, a SHA-256 repository, a repository
under a folder whose name git's own files would misread, file names that are not UTF-8, a
checkout in the middle of a rebase, an agent making a git repository inside its worktree, and
thousands of tags and remote branches."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from flowd.base.errors import InputError
from flowd.events.model import PerimeterViolation
from flowd.vcs.gitops import Repo
from tests.engine.scenario import Scenario, coder, git, story

ID = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _violations(sc: Scenario, run_id: str) -> list[PerimeterViolation]:
    return [e.event for e in sc.events(run_id) if isinstance(e.event, PerimeterViolation)]


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A", "--", ".", ":(exclude).flow", ":(exclude)ep.epic.json")
    git(repo, *ID, "commit", "-q", "-m", message)


def test_line_ending_rules_make_no_phantom_changes(tmp_path: Path) -> None:
    """`core.autocrlf` and `.gitattributes` eol rules: worktrees check files out with CRLF, a tool
    that rewrites a file it does not own with other line endings only changes nothing, and the
    story's own file is committed normalised."""
    stories = [story("win", ["win/"])]
    rules = [
        coder(
            "win",
            {"win/new.bat": "echo new\r\n"},
            # A formatter in the lane rewrites files to LF, one of them outside the perimeter.
            run=["sed -i 's/\\r$//' tools/build.bat notes.txt"],
        )
    ]
    files = {
        ".gitattributes": "*.bat text eol=crlf\n*.sh text eol=lf\n",
        "tools/build.bat": "echo build\r\n",
        "tools/run.sh": "echo run\n",
        "notes.txt": "one\ntwo\n",
    }
    sc = Scenario.create(
        tmp_path, stories, rules, files=files, settings="judgeRounds = 0\nmaxReviewRounds = 1\n"
    )
    git(sc.repo, "config", "core.autocrlf", "true")
    # A fresh checkout of the user's repository under these rules.
    git(sc.repo, "rm", "-q", "--cached", "-r", ".")
    git(sc.repo, "reset", "-q", "--hard")
    assert git(sc.repo, "status", "--porcelain") == "?? .flow/\n?? ep.epic.json\n"
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert _violations(sc, result.run_id) == []
    changed = git(sc.repo, "diff", "--name-only", "main", "epic/ep").split()
    assert changed == ["win/new.bat"]
    # Stored normalised (LF), as git's rules say; checked out with CRLF.
    assert git(sc.repo, "cat-file", "blob", "epic/ep:win/new.bat") == "echo new\n"
    epic_wt = sc.worktree_root / "ep" / "_epic"
    assert (epic_wt / "tools" / "build.bat").read_bytes() == b"echo build\r\n"
    assert (epic_wt / "win" / "new.bat").read_bytes() == b"echo new\r\n"


def _hooks(home: Path) -> Path:
    """A user-level `core.hooksPath` whose pre-commit rejects every commit and whose other hooks
    write down that they ran."""
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    ran = home / "hooks-ran.log"
    for name in (
        "post-checkout",
        "post-commit",
        "post-merge",
        "commit-msg",
        "pre-merge-commit",
        "reference-transaction",
    ):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> '{ran}'\n", encoding="utf-8")
    (hooks / "pre-commit").write_text(f"#!/bin/sh\necho pre-commit >> '{ran}'\nexit 1\n", encoding="utf-8")
    for hook in hooks.iterdir():
        hook.chmod(0o755)
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n", encoding="utf-8")
    return ran


def test_a_users_hooks_never_run_on_flowds_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    rules = [coder("a", {"a.txt": "a\n"}), coder("b", {"b.txt": "b\n"})]
    sc = Scenario.create(tmp_path, stories, rules, settings="judgeRounds = 0\n")
    home = tmp_path / "home"
    ran = _hooks(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    # The hooks are real: the user's own commit is rejected by them.
    (sc.repo / "mine.txt").write_text("mine\n", encoding="utf-8")
    git(sc.repo, "add", "mine.txt")
    rejected = subprocess.run(["git", *ID, "commit", "-q", "-m", "mine"], cwd=sc.repo, capture_output=True)
    assert rejected.returncode != 0 and ran.read_text(encoding="utf-8").split() == ["pre-commit"]
    ran.unlink()
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    assert not ran.exists(), ran.read_text(encoding="utf-8")


def test_a_default_branch_other_than_main(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})])
    git(sc.repo, "branch", "-m", "main", "trunk")
    assert not Repo(sc.repo).branch_exists("main")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert git(sc.repo, "merge-base", "--is-ancestor", "trunk", "epic/ep") == ""
    assert git(sc.repo, "branch", "--show-current").strip() == "trunk"


def test_a_shallow_clone(tmp_path: Path) -> None:
    upstream = Scenario.create(tmp_path / "up", [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})])
    for n in range(3):
        (upstream.repo / f"history{n}.txt").write_text(f"{n}\n", encoding="utf-8")
        _commit(upstream.repo, f"history {n}")
    clone = tmp_path / "clone" / "repo"
    clone.parent.mkdir()
    git(clone.parent, "clone", "-q", "--depth", "1", upstream.repo.as_uri(), str(clone))
    assert git(clone, "rev-parse", "--is-shallow-repository").strip() == "true"
    sc = Scenario(clone, clone / "ep.epic.json")
    upstream.plan_path.replace(sc.plan_path)
    (upstream.repo / ".flow").rename(clone / ".flow")
    stories = [story("a", ["a.txt"]), story("b", ["b.txt"], ["a"])]
    sc.plan_path.write_text(json.dumps({"epicId": "ep", "epic": "e", "stories": stories}), encoding="utf-8")
    # The agent's own `git log` and commit in its lane: the lane's git knows the clone is shallow
    # (it read no `shallow` file, and failed on the missing parents).
    agent_git = "git log --oneline > a.txt && git add a.txt && git commit -q -m 'by its agent' && git log -1 --format=%s"
    sc.write_script([coder("a", {"a.txt": "a\n"}, run=[agent_git]), coder("b", {"b.txt": "b\n"})])
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story a", "ep: merge story b"]
    assert "history 2" in git(sc.repo, "show", "epic/ep:a.txt")
    assert "by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")


def test_git_lfs_set_up_without_git_lfs_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        ".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n",
        "big.bin": "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 12345\n",
    }
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})], files=files)
    # Pointer files without the filter set up: they are files like any other.
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    # What `git lfs install` writes to ~/.gitconfig, on a machine where git-lfs is not on PATH.
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        '[filter "lfs"]\n\tprocess = git-lfs filter-process\n\trequired = true\n'
        "\tclean = git-lfs clean -- %f\n\tsmudge = git-lfs smudge -- %f\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.setenv(
        "PATH",
        os.pathsep.join(
            d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "git-lfs").exists()
        ),
    )
    sc.plan_path.write_text(
        json.dumps({"epicId": "ep2", "epic": "e", "stories": [story("b", ["b.txt"])]}), encoding="utf-8"
    )
    with pytest.raises(InputError) as raised:
        sc.run()
    said = str(raised.value)
    assert str(sc.repo / ".gitattributes") in said and "git-lfs is not installed" in said
    assert "\n" not in said
    assert Repo(sc.repo).lfs_problem() == said


def test_spaces_and_non_ascii_letters_in_paths(tmp_path: Path) -> None:
    root = tmp_path / "my projects" / "Zürich ☃"
    stories = [story("umlaut", ["docs/naïve file.md", "src/"])]
    rules = [coder("umlaut", {"docs/naïve file.md": "# café\n", "src/grüße.py": "x = 1\n"})]
    sc = Scenario.create(
        root, stories, rules, files={"src/ünïcode dir/keep.txt": "k\n"}, settings="judgeRounds = 0\n"
    )
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert _violations(sc, result.run_id) == []
    files = git(sc.repo, "-c", "core.quotePath=false", "ls-tree", "-r", "--name-only", "epic/ep").splitlines()
    assert {"docs/naïve file.md", "src/grüße.py", "src/ünïcode dir/keep.txt"} <= set(files)


def test_a_feature_branch_of_a_master_repository_with_uncommitted_work(tmp_path: Path) -> None:
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})])
    git(sc.repo, "branch", "-m", "main", "master")
    git(sc.repo, "checkout", "-q", "-b", "feature/login")
    (sc.repo / "login.py").write_text("committed on the feature\n", encoding="utf-8")
    _commit(sc.repo, "feature work")
    (sc.repo / "README.md").write_text("# my uncommitted edit\n", encoding="utf-8")
    (sc.repo / "scratch.txt").write_text("untracked\n", encoding="utf-8")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    # The epic starts from the feature branch, the user's work is untouched.
    assert "login.py" in sc.epic_files() and "a.txt" in sc.epic_files()
    assert git(sc.repo, "show", "epic/ep:README.md") == "# sample\n"
    assert git(sc.repo, "branch", "--show-current").strip() == "feature/login"
    assert (sc.repo / "README.md").read_text(encoding="utf-8") == "# my uncommitted edit\n"
    assert sorted(git(sc.repo, "status", "--porcelain").splitlines()) == [
        " M README.md",
        "?? ep.epic.json",
        "?? scratch.txt",
    ]


def test_a_sha256_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository made with `--object-format=sha256`: found with its commits, an agent's own
    commit taken in from its quarantine, a blob too big to hold packed from its file, both merged,
    the store whole (the pack flowd hands git closes with the repository's own hash)."""
    monkeypatch.setenv("GIT_DEFAULT_HASH", "sha256")  # what `git init` makes, for this test only
    stories = [story("own", ["own.txt"]), story("big", ["big/"])]
    rules = [
        coder("own", {"own.txt": "own\n"}, run=["git add -A && git commit -q -m 'by its agent'"]),
        coder("big", {"big/note.txt": "big\n"}, run=["head -c 2100000 /dev/urandom > big/data.bin"]),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    monkeypatch.delenv("GIT_DEFAULT_HASH")
    assert git(sc.repo, "rev-parse", "--show-object-format").strip() == "sha256"
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story big", "ep: merge story own"]
    assert "by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")
    assert {"own.txt", "big/data.bin"} <= set(sc.epic_files())
    git(sc.repo, "fsck", "--full", "--no-dangling")


def test_a_sha256_repository_without_commits_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "--object-format=sha256", str(repo))
    with pytest.raises(InputError, match="has no commits yet"):
        Repo.discover(repo)


def test_a_repository_under_a_folder_name_git_would_misread(tmp_path: Path) -> None:
    """A colon (the separator of `GIT_ALTERNATE_OBJECT_DIRECTORIES`), a quote, a backslash, `;`
    and `#` (a git config file's) in the path of your repository: the lane's git finds its
    objects and reads its config, its own commit is taken in, both stories merge."""
    root = tmp_path / 'we:ird "name" \\ ;#x'
    stories = [story("own", ["own.txt"]), story("b", ["b.txt"], ["own"])]
    rules = [
        coder("own", {"own.txt": "own\n"}, run=["git add -A && git commit -q -m 'by its agent'"]),
        coder("b", {"b.txt": "b\n"}),
    ]
    sc = Scenario.create(root, stories, rules)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert sorted(sc.merge_commits()) == ["ep: merge story b", "ep: merge story own"]
    assert "by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")
    git(sc.repo, "fsck", "--full", "--no-dangling")


def test_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    """An agent writes names no UTF-8 holds (a byte 0xFF in its perimeter, 0xFE outside it) and
    one with a newline: the story finishes, its own files are committed as they are, the one
    outside is put back, and the trace, findings and report show the name with its byte escaped
    (they stopped the story: "surrogates not allowed")."""
    inside, outside = "printf 'own/bad\\377name.txt'", "printf 'out\\376side.txt'"
    make = (
        f'printf x > "$({inside})" && printf y > "$({outside})" && printf z > "$(printf \'own/new\\nline\')"'
    )
    sc = Scenario.create(tmp_path, [story("own", ["own/"])], [coder("own", {"own/a.txt": "a\n"}, run=[make])])
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "-z", "--name-only", "epic/ep"], cwd=sc.repo, capture_output=True, check=True
    )
    files = listed.stdout.split(b"\0")
    assert {b"own/a.txt", b"own/bad\xffname.txt", b"own/new\nline"} <= set(files)
    assert not any(name.startswith(b"out") for name in files)
    flagged = [p.path for v in _violations(sc, result.run_id) for p in v.paths]
    assert flagged and set(flagged) == {"out\\xfeside.txt"}
    findings = (sc.repo / ".flow" / "epics" / "ep" / "stories" / "own.findings.md").read_text(
        encoding="utf-8"
    )
    assert "out\\xfeside.txt" in findings


def test_a_checkout_in_the_middle_of_a_rebase(tmp_path: Path) -> None:
    """A new epic starts at your HEAD; in a stopped rebase that is a step of the rebase (here
    `main` without your branch's commit): one sentence, nothing made. With `--base` it runs, and a
    resumed epic (its branch there already) is not asked again."""
    sc = Scenario.create(tmp_path, [story("a", ["a.txt"])], [coder("a", {"a.txt": "a\n"})])
    (sc.repo / "x.txt").write_text("base\n", encoding="utf-8")
    _commit(sc.repo, "x")
    git(sc.repo, "checkout", "-q", "-b", "feature")
    (sc.repo / "x.txt").write_text("feature\n", encoding="utf-8")
    _commit(sc.repo, "feature x")
    git(sc.repo, "checkout", "-q", "main")
    (sc.repo / "x.txt").write_text("main\n", encoding="utf-8")
    _commit(sc.repo, "main x")
    git(sc.repo, "checkout", "-q", "feature")
    stopped = subprocess.run(["git", *ID, "rebase", "main"], cwd=sc.repo, capture_output=True, text=True)
    assert stopped.returncode != 0 and (sc.repo / ".git" / "rebase-merge").is_dir()
    with pytest.raises(InputError) as raised:
        sc.run()
    assert str(raised.value) == (
        f"your checkout {sc.repo} is in the middle of a rebase ({sc.repo / '.git' / 'rebase-merge'}); "
        "finish or abort it, or name the epic's starting point with --base"
    )
    assert "epic/ep" not in git(sc.repo, "branch") and not sc.worktree_root.exists()
    result = sc.run(base="feature")
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert git(sc.repo, "merge-base", "--is-ancestor", "feature", "epic/ep") == ""
    assert sc.run().outcome == "done"  # the epic's branch exists: no question of where it starts


@pytest.mark.parametrize("made", ["with a commit", "without one"])
def test_a_git_repository_an_agent_makes_inside_its_worktree(tmp_path: Path, made: str) -> None:
    """A project generator's `git init` (with its first commit, or none) in the story's folder: the
    agent is told, removes the folder's `.git`, and its files are committed as files. Before, git
    staged the folder as a link to a commit no one has (a broken submodule in your epic), or
    flowd's commit failed ("does not have a commit checked out") and so did the story."""
    init = "mkdir -p web && echo page > web/page.txt && cd web && git init -q"
    if made == "with a commit":
        init += " && git add . && git -c user.name=a -c user.email=a@a commit -q -m scaffold"
    rules = [
        {"when": {"role": "coder", "story": "web", "prompt": "git repositories of their own"},
         "run": ["rm -rf web/.git"], "reply": "removed"},
        coder("web", {"web/app.txt": "app\n"}, run=[init]),
    ]  # fmt: skip
    sc = Scenario.create(tmp_path, [story("web", ["web/"])], rules, settings="judgeRounds = 0\n")
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    tree = git(sc.repo, "ls-tree", "-r", "epic/ep", "web")
    assert "160000" not in tree and {"web/app.txt", "web/page.txt"} <= set(sc.epic_files()), tree


def test_a_repository_with_many_refs(tmp_path: Path) -> None:
    """Thousands of packed tags and remote branches, as a big monorepo's clone has, and a loose
    tag over a packed one: the lanes' git sees your refs as git does (what a lane's `git tag`,
    `git branch -r` and `git rev-parse` said is committed and read back), its own commit comes in,
    both stories merge, and nothing of yours moved (flowd/vcs/packed_refs.py)."""
    stories = [story("own", ["own/"]), story("b", ["b/"])]
    see = "git tag -l 'v*' | wc -l > own/tags && git rev-parse v42 > own/v42 && git branch -r | wc -l > own/remotes"
    rules = [
        coder("own", {"own/a.txt": "own\n"}, run=[see, "git add -A && git commit -q -m 'by its agent'"]),
        coder("b", {"b/b.txt": "b\n"}),
    ]
    sc = Scenario.create(tmp_path, stories, rules)
    head = git(sc.repo, "rev-parse", "HEAD").strip()
    made = "".join(f"create refs/tags/v{n} {head}\n" for n in range(3000)) + "".join(
        f"create refs/remotes/origin/feature-{n} {head}\n" for n in range(2000)
    )
    subprocess.run(["git", "update-ref", "--stdin"], cwd=sc.repo, input=made, text=True, check=True)
    git(sc.repo, "pack-refs", "--all")
    other = git(sc.repo, "commit-tree", "-m", "loose", "HEAD^{tree}").strip()
    git(sc.repo, "update-ref", "refs/tags/v42", other)  # loose, over the packed one
    refs = ["for-each-ref", "--format=%(refname) %(objectname)", "refs/tags", "refs/remotes"]
    before = git(sc.repo, *refs)
    result = sc.run()
    assert result.outcome == "done", {k: v.reason for k, v in result.view.lanes.items()}
    assert "by its agent" in git(sc.repo, "log", "--format=%s", "epic/ep")
    said = {name: git(sc.repo, "show", f"epic/ep:own/{name}").strip() for name in ("tags", "v42", "remotes")}
    assert said == {"tags": "3000", "v42": other, "remotes": "2000"}
    assert git(sc.repo, *refs) == before
    git(sc.repo, "fsck", "--full", "--no-dangling")
