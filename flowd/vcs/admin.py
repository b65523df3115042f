"""A linked worktree's git admin files as data flowd checks, never pointers it follows
(docs/sandbox.md "flowd's own git"): the worktree's `.git` file and, in its admin dir
`<common>/worktrees/<id>` (its lane may write there), `gitdir`, `commondir`, `HEAD`, `index`,
`config.worktree` and the reflogs. flowd knows what each must say; whatever says otherwise, or
is a link (a hard one too) a lane planted there, is a `gitDir` problem and is put back: flowd's own
git commands and file writes would otherwise land where the lane chose (a `commondir` naming a
copy of the git dir whose config starts a command, an `index` or `logs/HEAD` linked to a file of
the user's, a `HEAD` naming the user's branch).
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from flowd.base.fsio import put_back, read_regular
from flowd.vcs import lane_repo
from flowd.vcs.gitcli import GitDirChanged, GitError, admin_of, run_git, small_file
from flowd.vcs.quarantine import discard, drop_missing_entries, held, missing, quarantine
from flowd.vcs.submodules import gitlinks

# The settings git itself writes to a worktree's `config.worktree` (`git sparse-checkout`, the
# one flowd uses): any other could start a command from flowd's own git (`core.fsmonitor` is
# sealed, but `include.path`, a filter or diff driver, a new setting of a later git are not all).
WORKTREE_CONFIG_KEYS = frozenset({"core.sparsecheckout", "core.sparsecheckoutcone", "index.sparse"})
# What git writes to the config of a submodule's git dir (`<admin>/modules/<name>/config`, the
# lane's to write like the rest of its admin dir): `git submodule update` clones, a sparse one.
MODULE_CONFIG_KEYS = frozenset(
    {
        "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
        "core.worktree", "core.ignorecase", "core.precomposeunicode", "core.symlinks",
        "core.sparsecheckout", "core.sparsecheckoutcone", "index.sparse", "extensions.objectformat",
    }
)  # fmt: skip
MODULE_CONFIG_PATTERNS = (("remote.", (".url", ".fetch")), ("branch.", (".remote", ".merge")),
                          ("submodule.", (".url", ".active")))  # fmt: skip
# Branches a lane's HEAD may name: flowd's own (docs/repositories.md "Where things are").
OWN_BRANCHES = ("refs/heads/story/", "refs/heads/epic/")
# The lane's own temp dir (its TMPDIR, engine/sandbox) and its submodules' git dirs are not
# admin files: links there are the lane's business (flowd's git never writes through them).
_NOT_ADMIN = ("flowd-tmp", "modules")


@dataclass(frozen=True)
class AdminProblem:
    """One admin file of a lane that says what it must not, and whether flowd put it back."""

    path: Path
    why: str
    put_back: bool
    at: float | None = None  # when it was written (its mtime before flowd put it back)
    # The `LaneEscape.what` it is reported as; None: no escape, a fact an `Info` says (objects a
    # merge-train candidate's gates wrote and no ref names, thrown away: `check_candidate`).
    what: str | None = "gitDir"
    # Found before a candidate's gates ran (a cluster node's slot checked before its reuse): left
    # by an earlier candidate's gates, so never blamed on this one's story.
    earlier: bool = False


def check_admin(common_dir: Path, wt: Path, head: str | None = None) -> list[AdminProblem]:
    """Check (and put back) the admin files of the linked worktree `wt` of the repository whose
    common dir is `common_dir`. `head`: what its `HEAD` must say when it names a branch
    (`ref: refs/heads/…`, the lane's own), when the caller knows; without it any of flowd's
    branches will do; a commit: the worktree is detached (a merge-train candidate) and a `HEAD`
    naming any branch is put back to that commit. A detached `HEAD` is always the lane's business
    (a rebase, a bisect). Empty: all is as flowd left it (or `wt` is not one of the repository's
    worktrees)."""
    real = Path(os.path.realpath(wt))
    try:
        admin = admin_of(common_dir, real)
    except GitDirChanged as exc:
        return [AdminProblem(real / ".git", str(exc), False, _mtime(real / ".git"))]
    if admin is None:
        if os.path.lexists(real / ".git") and not (real / ".git").is_dir():
            why = "no admin dir of the repository names this worktree"
            return [AdminProblem(real / ".git", why, False, _mtime(real / ".git"))]
        return []
    found: list[AdminProblem] = []
    want = {
        real / ".git": lane_repo.dotgit_text(admin),
        admin / "gitdir": f"{real / '.git'}\n",
        admin / "commondir": "../..\n",
    }
    for path, text in want.items():
        if small_file(path) != text.strip() and not _same_place(path, text):
            if path.name == ".git" and _flowds_own(path, admin):
                continue
            at = _mtime(path)
            found.append(AdminProblem(path, "names another git dir", _write(path, text), at))
    found += _check_head(admin, head)
    found += _check_links(admin)
    found += _check_worktree_config(admin)
    found += _check_modules(admin, real)
    return found


def check_candidate(common_dir: Path, wt: Path, at: str) -> list[AdminProblem]:
    """A merge-train candidate `wt` after its epic gates ran, or before flowd's git uses its slot
    again (docs/merging.md "A candidate's admin files are data"): its admin files checked and put
    back (`check_admin`, a `HEAD` naming a branch put back to the commit `at`), and its object
    quarantine thrown away: a candidate keeps nothing its gates wrote, flowd never takes it in.
    A detached `HEAD` naming a commit the repository does not hold (one the gates made) is put
    back to `at`, and its reflog loses the entries naming what was thrown away (`git fsck` of
    your repository, a `git fetch`'s connectivity check, read every worktree's `HEAD`)."""
    found = check_admin(common_dir, wt, at)
    real = Path(os.path.realpath(wt))
    try:
        admin = admin_of(common_dir, real)
    except GitDirChanged:
        return found  # said by `check_admin`; flowd's git refuses to run there
    if admin is None:
        return found
    # The gates' own git moved the lane repository's detached HEAD (a commit in the candidate):
    # said as the admin dir's would be, and put back with the rest (docs/merging.md).
    own_head = lane_repo.lane_git(admin) / "HEAD"
    said_own = small_file(own_head) if lane_repo.active(admin) else None
    moved_own = _is_sha(said_own) and said_own != at and bool(missing(common_dir, [str(said_own)]))
    own_time = _mtime(own_head)
    count = held(admin)
    discard(admin)
    lane_repo.sync(common_dir, admin, real, force=True)  # nothing of the gates' commits either
    if count:
        why = f"held {count} object(s) the epic gates wrote; thrown away (a candidate keeps none)"
        found.append(AdminProblem(quarantine(admin), why, not os.path.lexists(quarantine(admin)), what=None))
    if moved_own:
        why = "names a commit the epic gates wrote, which the repository does not hold"
        done = small_file(own_head) != said_own
        found.append(AdminProblem(own_head, why, done, own_time, what="gitObjects"))
    head = admin / "HEAD"
    said = small_file(head)
    if _is_sha(said) and said != at and missing(common_dir, [str(said)]):
        at_time = _mtime(head)
        done = _write(head, at + "\n")
        done = drop_missing_entries(common_dir, admin / "logs" / "HEAD") and done
        why = "names a commit the epic gates wrote, which the repository does not hold"
        found.append(AdminProblem(head, why, done, at_time, what="gitObjects"))
    if count:
        # The index may name a blob that was thrown away (`git add` in a gate): read from HEAD.
        run_git(real, ["read-tree", "HEAD"], "", ok_codes=range(256))
    return found


def _flowds_own(dotgit: Path, admin: Path) -> bool:
    """Whether the worktree's `.git` names its admin dir or its lane repository while `want`
    named the other: flowd's own passing state, never a lane's escape. flowd makes the lane
    repository, then names it (`lane_repo.make`, `point`), and names the admin dir again around
    git's `worktree move` (`unpoint`); a check from another thread reads `active` and the file at
    two moments and may fall between. Both are this worktree's own git dirs, made by flowd: a
    lane naming one reaches nothing of another lane's or of yours (the admin dir it cannot write
    keeps only its own git out), and the next step names the lane repository again."""
    return _same_place(dotgit, f"gitdir: {admin}\n") or _same_place(
        dotgit, f"gitdir: {lane_repo.lane_git(admin)}\n"
    )


def _same_place(path: Path, text: str) -> bool:
    """Whether the pointer file `path` names the same place as `text` does, one of them relative
    to the file's folder (git's `worktree.useRelativePaths` writes them so)."""
    said, meant = small_file(path), text.strip()
    if said is None:
        return False
    prefix = "gitdir: " if meant.startswith("gitdir: ") else ""
    if not said.startswith(prefix):
        return False
    here = os.path.normpath(os.path.join(path.parent, said.removeprefix(prefix).strip()))
    return here == meant.removeprefix(prefix) and path.name != "commondir"


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def _write(path: Path, text: str) -> bool:
    """Put `text` at `path`: a new file renamed over whatever is there (a link is replaced, never
    followed); False when it could not be done."""
    return put_back(path, text.encode("utf-8"))


def _check_head(admin: Path, head: str | None) -> list[AdminProblem]:
    path = admin / "HEAD"
    now = small_file(path)
    if now is None and not os.path.lexists(path):
        return []
    detached = _is_sha(now)
    if head is not None and _is_sha(head.strip()):
        good = detached  # a merge-train candidate: detached, whatever commit it is at
    elif head is not None:
        good = detached or now == head.strip()
    else:
        good = detached or (now is not None and now.startswith("ref: ") and now[5:].startswith(OWN_BRANCHES))
    if good:
        return []  # the lane's own branch or a detached commit (a rebase, a bisect): its business
    at, why = _mtime(path), "names a branch that is not the lane's"
    return [AdminProblem(path, why, head is not None and _write(path, head.strip() + "\n"), at)]


def _is_sha(text: str | None) -> bool:
    return text is not None and len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


def _check_links(admin: Path) -> list[AdminProblem]:
    """Links in the admin dir (its own files and `logs/`): flowd's git writes the index through
    a lock file renamed over the link's target, and appends to the reflogs through them."""
    found: list[AdminProblem] = []
    for path in _admin_files(admin):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            at = st.st_mtime
            with contextlib.suppress(OSError):
                os.unlink(path)
            index = path == admin / "index"
            done = not os.path.lexists(path) and (not index or _rebuild_index(admin))
            found.append(AdminProblem(path, "is a link", done, at))
        elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            found.append(AdminProblem(path, "is a hard link to another file", _unshare(path), st.st_ctime))
    return found


def _admin_files(admin: Path) -> list[Path]:
    out: list[Path] = []
    with contextlib.suppress(OSError):
        for name in os.listdir(admin):
            if name not in _NOT_ADMIN:
                out.append(admin / name)
    for top, dirs, files in os.walk(admin / "logs"):  # os.walk follows no link to a folder
        out += [Path(top) / name for name in (*dirs, *files)]
    return out


def _unshare(path: Path) -> bool:
    """Give `path` a file of its own with the same bytes (the other name keeps the old file);
    bytes as they are: a hard-linked `index` is no text."""
    data = read_regular(path, None)
    return data is not None and put_back(path, data)


def _rebuild_index(admin: Path) -> bool:
    """The index a lane replaced with a link, made again from the worktree's HEAD (its files stay
    as they are: its changes show as unstaged)."""
    real = Path(small_file(admin / "gitdir") or "").parent
    proc = run_git(real, ["read-tree", "HEAD"], "", ok_codes=range(256))
    return proc.returncode == 0


def _check_worktree_config(admin: Path) -> list[AdminProblem]:
    path = admin / "config.worktree"
    if not os.path.lexists(path) or os.path.islink(path):
        return []  # absent, or a link `_check_links` removed
    entries = _config_entries(path)
    if entries is not None and all(key in WORKTREE_CONFIG_KEYS for key, _ in entries):
        return []
    kept = [(key, value) for key, value in entries or [] if key in WORKTREE_CONFIG_KEYS]
    at = _mtime(path)
    return [
        AdminProblem(path, "holds settings git does not write there", _write(path, _config_text(kept)), at)
    ]


def _config_entries(path: Path) -> list[tuple[str, str]] | None:
    """(key, value) of a config file, read by git's own parser with no include followed, from no
    repository (an admin dir's `commondir` is the lane's); None when git cannot read it."""
    listed = run_git(
        Path("/"), ["config", "-f", str(path), "--no-includes", "-z", "--list"], "", ok_codes=range(256)
    )
    if listed.returncode != 0:
        return None
    out = []
    for entry in listed.stdout.split("\0"):
        if entry:
            key, _, value = entry.partition("\n")
            out.append((key.lower() if key.count(".") < 2 else _lower_ends(key), value))
    return out


def _lower_ends(key: str) -> str:
    """`section.Sub.Section.key` with its section and key in lower case (the subsection keeps its
    case, as git compares it)."""
    section, _, rest = key.partition(".")
    sub, _, name = rest.rpartition(".")
    return f"{section.lower()}.{sub}.{name.lower()}"


def _config_text(entries: list[tuple[str, str]]) -> str:
    """A config file holding `entries`, one section per section and subsection, values quoted."""
    sections: dict[str, list[str]] = {}
    for key, value in entries:
        section, _, rest = key.partition(".")
        sub, _, name = rest.rpartition(".")
        head = f'[{section} "{_quoted_sub(sub)}"]' if sub else f"[{section}]"
        sections.setdefault(head, []).append(f"\t{name} = {_quoted(value)}\n")
    return "".join(head + "\n" + "".join(lines) for head, lines in sections.items())


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _quoted_sub(sub: str) -> str:
    return sub.replace("\\", "\\\\").replace('"', '\\"')


def _module_key_ok(key: str) -> bool:
    if key in MODULE_CONFIG_KEYS:
        return True
    return any(key.startswith(head) and key.endswith(tails) for head, tails in MODULE_CONFIG_PATTERNS)


def _check_modules(admin: Path, wt: Path) -> list[AdminProblem]:
    """The worktree's submodules: each one's `.git` file names its git dir in `<admin>/modules/`,
    and that git dir's `config` holds only what `git submodule update` writes there (with a
    `core.worktree` inside the worktree). flowd's own git runs in them (a reuse's scrub)."""
    modules = admin / "modules"
    if not modules.is_dir() or modules.is_symlink():
        return []
    found: list[AdminProblem] = []
    for name, rel, _sha in _links(wt):
        dotgit = wt / rel / ".git"
        want = modules / name
        if not os.path.lexists(dotgit) or dotgit.is_dir() or not want.is_dir():
            continue
        named = small_file(dotgit) or ""
        target = os.path.realpath(os.path.join(dotgit.parent, named.removeprefix("gitdir:").strip()))
        if target != os.path.realpath(want):
            at = _mtime(dotgit)
            found.append(
                AdminProblem(dotgit, "names another git dir", _write(dotgit, f"gitdir: {want}\n"), at)
            )
    for top, dirs, files in os.walk(modules):  # follows no link to a folder
        if "config" in files and "HEAD" in files:
            found += _check_module_config(Path(top) / "config", wt)
        dirs[:] = [d for d in dirs if d not in ("objects", "refs", "logs")]
    return found


def _links(wt: Path) -> list[tuple[str, str, str]]:
    try:
        return gitlinks(wt)
    except GitError:
        return []


def _check_module_config(path: Path, wt: Path) -> list[AdminProblem]:
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return [AdminProblem(path, "is a link", False, None)]
    entries = _config_entries(path) or []

    def ok(key: str, value: str) -> bool:
        if key != "core.worktree":
            return _module_key_ok(key)
        where = os.path.realpath(os.path.join(path.parent, value))
        return where == str(wt) or where.startswith(str(wt) + os.sep)

    if all(ok(key, value) for key, value in entries):
        return []
    kept = [(key, value) for key, value in entries if ok(key, value)]
    at = _mtime(path)
    return [
        AdminProblem(path, "holds settings git does not write there", _write(path, _config_text(kept)), at)
    ]
