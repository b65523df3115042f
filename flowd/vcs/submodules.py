"""Submodules in flowd's worktrees (docs/repositories.md): checked out from a local copy that
holds the recorded commit, found without git when there are none, scrubbed back to their index."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from flowd.vcs.gitcli import GitError, git_reason, private_git_dir, run_git, split_z


def sync_submodules(root: Path, common_dir: Path, wt: Path) -> None:
    """Check out every submodule of `wt` at the commit its index records, recursively.

    Each is cloned (hardlinked) from a local copy that holds that commit: the user's
    `.git/modules/<name>`, the submodule checked out in the user's checkout, or another
    flowd worktree's copy (a story's new submodule commit reaches the epic this way). Only a
    submodule no local copy holds is fetched from its URL. Nothing is written to the
    repository's shared config: the local source is a `-c` for this one command.
    """
    wt = Path(wt)
    links = gitlinks(wt)
    if not links:
        return
    what = f"could not check out the submodules of the worktree {wt}"
    overrides: list[str] = []
    for name, rel, sha in links:
        source = next(
            (c for c in _module_sources(root, common_dir, wt, name, rel) if has_commit(c, sha)), None
        )
        if source is None:
            continue
        target = wt / rel
        if (target / ".git").exists():
            if not has_commit(target, sha):
                run_git(
                    target,
                    ["-c", "protocol.file.allow=always", "fetch", "-q", "--no-tags", str(source), sha],
                    what,
                )
        else:
            overrides += ["-c", f"submodule.{name}.url={source}"]
    # Local clones are the `file` transport, which git (2.38.1 on) refuses for submodules
    # unless allowed; the sources are the user's own repositories.
    args = [
        "-c",
        "protocol.file.allow=always",
        *overrides,
        "submodule",
        "update",
        "--init",
        "--recursive",
        "-q",
    ]
    proc = run_git(wt, [*args, "--", *(rel for _, rel, _ in links)], what, ok_codes=range(256))
    if proc.returncode != 0:
        raise GitError(
            f"{what}: {git_reason(proc)}; check them out in {root} "
            "(git submodule update --init --recursive) so flowd can copy them from there",
            detail=proc.stderr,
        )


def _module_sources(root: Path, common_dir: Path, wt: Path, name: str, rel: str) -> list[Path]:
    own = private_git_dir(wt)
    found = [common_dir / "modules" / name]
    if (root / rel / ".git").exists():
        found.append(root / rel)
    found += sorted((common_dir / "worktrees").glob(f"*/modules/{name}"))
    return [c for c in found if c.is_dir() and not (own is not None and c.is_relative_to(own))]


def gitlinks(wt: Path) -> list[tuple[str, str, str]]:
    """(name, path, recorded commit) of each submodule `.gitmodules` of `wt` declares and its
    index records; empty (one stat, no git) in a repository without submodules."""
    if not (wt / ".gitmodules").is_file():
        return []
    what = f"could not read the submodules of the worktree {wt}"
    declared = run_git(
        wt,
        ["config", "-z", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"],
        what,
        ok_codes=(0, 1),
    ).stdout
    names: dict[str, str] = {}
    for entry in split_z(declared):
        key, _, rel = entry.partition("\n")
        names[rel] = key.removeprefix("submodule.").removesuffix(".path")
    staged = run_git(wt, ["ls-files", "-s", "-z", "--", *names], what).stdout if names else ""
    links: list[tuple[str, str, str]] = []
    for entry in split_z(staged):
        meta, _, rel = entry.partition("\t")
        mode, sha, _stage = meta.split(" ")
        if mode == "160000" and rel in names:
            links.append((names[rel], rel, sha))
    return links


def has_submodules(wt: Path) -> bool:
    """Whether `wt` has (or had) submodules checked out: git then refuses to move it."""
    private = private_git_dir(Path(wt))
    if private is not None and (private / "modules").is_dir():
        return True
    return any((Path(wt) / rel / ".git").exists() for _, rel, _ in gitlinks(Path(wt)))


def _literal_pattern(rel: str) -> str:
    """A gitignore pattern matching exactly the repository-relative file `rel`."""
    escaped = "".join("\\" + ch if ch in "\\*?[" else ch for ch in rel)
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return "/" + escaped


def scrub(where: Path, what: str, keep: Sequence[str] = ()) -> None:
    """Every file of the checkout `where` back to its index (already its HEAD), every untracked
    and ignored one removed but `keep`; then the same inside each checked-out submodule,
    recursively (the superproject's `checkout -f` and `clean` leave submodules' files alone)."""
    run_git(where, ["reset", "-q", "--hard"], what)
    excludes = [arg for rel in keep for arg in ("-e", _literal_pattern(rel))]
    # -ff: nested repositories too (a submodule the new commit no longer has).
    run_git(where, ["clean", "-ffdxq", *excludes], what)
    for _name, rel, _sha in gitlinks(where):
        if (where / rel / ".git").exists():
            scrub(where / rel, what)


def has_commit(where: Path, sha: str) -> bool:
    proc = run_git(where, ["cat-file", "-e", f"{sha}^{{commit}}"], "", ok_codes=range(256))
    return proc.returncode == 0
