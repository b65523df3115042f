"""The escape campaign (docs/sandbox.md): the ways a lane's process might reach past its story,
as one shell script a scripted agent's turn and a task gate both run.

Each technique is (name, command, the path its refusal names). `{R}` is the user's checkout,
`{C}` the repository's common git dir, `{H}` the home directory, `{B}` the victim story's
worktree, `{E}` the epic worktree, `{T}` the tag (`agent` or `gate`), `{UP}` the `..` path from
the attacker's worktree to the checkout. Every command is independent of the others.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

SECRET = "CAMPAIGN-SECRET-KEY-0123456789"

# A commit of the lane's own (its objects in its quarantine): what a ref of the user's would be moved to.
_NEW = '"$(git commit-tree -m evil-{T} "HEAD^{{tree}}")"'
# The lane's own git works in its lane repository (docs/sandbox.md "The lane repository"): a plain
# `git config` or `git update-ref` there changes only that repository (the sealed campaign's
# "the lane repository's own config and refs" shows none of it reaches flowd's git). These aim at
# the user's repository itself, by `-C`, `GIT_DIR` or `--git-dir`, and the kernel refuses them.
TECHNIQUES: list[tuple[str, str, str]] = [
    ("absolute redirect", "echo x > {R}/ABS-{T}.txt", "{R}/ABS-{T}.txt"),
    ("dot-dot", "echo x > {UP}/DOTDOT-{T}.txt", "DOTDOT-{T}.txt"),
    ("symlink out", 'ln -s {R}/SYM-{T}.txt "$TMPDIR/link-{T}" && echo x > "$TMPDIR/link-{T}"', "link-{T}"),
    ("hardlink", 'ln {R}/README.md "$TMPDIR/hard-{T}" && echo x >> "$TMPDIR/hard-{T}"', "{R}/README.md"),
    ("/proc/self/cwd", "echo x > /proc/self/cwd/{UP}/PROC-{T}.txt", "PROC-{T}.txt"),
    ("/proc/<pid>/root", "echo x > /proc/$$/root{R}/ROOT-{T}.txt", "ROOT-{T}.txt"),
    ("git -C checkout", "git -C {R} branch evil-{T}", "refs/heads/evil-{T}"),
    ("git config local", "GIT_DIR={C} git config user.name evil-{T}", "{C}/config"),
    ("git config --global", "git config --global user.name evil-{T}", "{H}/.gitconfig"),
    ("core.hooksPath", "git --git-dir={C} config core.hooksPath /tmp/hooks-{T}", "{C}/config"),
    ("hook file", "printf '#!/bin/sh\\necho pwned\\n' > {C}/hooks/post-checkout", "{C}/hooks/post-checkout"),
    ("info/exclude", "echo evil >> {C}/info/exclude", "{C}/info/exclude"),
    ("update-ref main", "git -C {R} update-ref refs/heads/main " + _NEW, "{C}/refs/heads/main"),
    ("branch -f main", "GIT_DIR={C} git branch -f main " + _NEW, "{C}/refs/heads/main"),
    ("update-ref epic", "GIT_DIR={C} git update-ref refs/heads/epic/ep " + _NEW, "{C}/refs/heads/epic/ep"),
    ("branch -f epic/*", "git -C {R} branch -f epic/evil-{T} " + _NEW, "{C}/refs/heads/epic/evil-{T}"),
    ("another lane worktree", "echo x > {B}/INTRUDER-{T}.txt", "{B}/INTRUDER-{T}.txt"),
    ("the epic worktree", "echo x > {E}/INTRUDER-{T}.txt", "{E}/INTRUDER-{T}.txt"),
    ("another lane admin dir", "echo x > {C}/worktrees/b/INTRUDER-{T}", "{C}/worktrees/b/INTRUDER-{T}"),
    ("config.toml", "printf 'gates = [\"true\"]\\n' > {R}/.flow/config.toml", "{R}/.flow/config.toml"),
    ("roster.toml", "echo '# evil' >> {R}/.flow/roster.toml", "{R}/.flow/roster.toml"),
    ("roster-state.json", "echo '{{}}' > {R}/.flow/roster-state.json", "{R}/.flow/roster-state.json"),
    ("a trace", 'for f in {R}/.flow/runs/*/trace.jsonl; do echo evil >> "$f"; done', "trace.jsonl"),
    ("~/.bashrc", "echo 'echo pwned-{T}' >> ~/.bashrc", "{H}/.bashrc"),
    ("a file in $HOME", "echo x > ~/pwn-{T}.txt", "{H}/pwn-{T}.txt"),
    ("read ~/.ssh/id_*", 'cat ~/.ssh/id_ed25519 > "$TMPDIR/stolen-{T}.txt"', "{H}/.ssh/id_ed25519"),
    ("Python open()", "python3 -c \"open('{R}/PY-{T}.txt', 'w').write('x')\"", "{R}/PY-{T}.txt"),
    (
        "Node fs.writeFileSync",
        "node -e \"require('fs').writeFileSync('{R}/NODE-{T}.txt', 'x')\"",
        "{R}/NODE-{T}.txt",
    ),
    ("double-forked child", "(setsid sh -c 'echo x > {R}/LATE-{T}.txt' &) ; sleep 0.5", "{R}/LATE-{T}.txt"),
    (
        "GIT_DIR/GIT_WORK_TREE",
        "GIT_DIR={C} GIT_WORK_TREE={R} git commit -q --allow-empty -m evil-{T}",
        "{C}/",
    ),
    (
        "GIT_DIR update-ref",
        "GIT_DIR={C} git update-ref refs/heads/evil-dir-{T} HEAD",
        "refs/heads/evil-dir-{T}",
    ),
]


def fill(text: str, places: dict[str, str], tag: str) -> str:
    return text.format(**places, T=tag)


def script(places: dict[str, str], tag: str) -> str:
    """The campaign as one shell script; each step says its name first (the log reads well)."""
    # Gates are every story's: only the attacker's worktree runs the campaign.
    attacker = places["A"]
    lines = ["#!/bin/sh", f'[ "$PWD" = "{attacker}" ] || exit 0']
    for name, command, _ in TECHNIQUES:
        lines.append(f"echo '== {name}'")
        lines.append(f"{{ {fill(command, places, tag)} ; }} 2>&1")
    return "\n".join([*lines, "exit 0"]) + "\n"


def write_scripts(root: Path, places: dict[str, str]) -> dict[str, Path]:
    paths = {}
    for tag in ("agent", "gate"):
        path = root / f"campaign-{tag}.sh"
        path.write_text(script(places, tag), encoding="utf-8")
        paths[tag] = path
    return paths


# The sealed campaign (issue 50): what an attacker who has read flowd's source tries against what
# flowd, unconfined, does with what a lane wrote. Places beyond the ones above: `{A}` the attacking
# worktree, `{OWN}` its story's owned folder, `{P}` the proof folder (no lane may write it: a file
# there was made by a process outside every lane), `{OBJ}`, `{BLOB}`, `{TREE}`, `{PACKED}`,
# `{DANGLING}` objects of the user's (paths under `{C}`: the unpushed branch's commit, a blob and
# a tree of it, an object only in a pack, a blob only `git fsck --lost-found` would find), `{WIP}`
# that commit's id, `{EDITOR}` the pid of the user's editor stand-in (working in `{R}`),
# `{RUNNER}` flowd's own pid, `{SIG}` the signal this origin sends it, `{VSIG}` the one it sends
# the victim lane's processes, `{ABSTRACT}` an abstract unix socket of the user's session,
# `{SOCK}` a unix socket file of the user's (the ssh-agent stand-in), `{STAY}` how long a process
# that tries to outlive its lane sleeps (it names it), `{PRECIOUS}` a folder of the user's named
# `worktrees/<x>`, `{PROJECTS}` another folder of the user's, `{SECRET}` a secret in flowd's own
# environment. Shell variables the prologue
# sets: `$E` a folder in the lane's own temp dir, `$ADMIN` the lane's git admin dir.


@dataclass(frozen=True)
class Technique:
    """One way past a lane.

    `refused`: the path the OS refusal names (in the findings, by who tried, and as a
    `LaneEscape` `denied`), or None where the write is the lane's own to make (its admin files,
    a link in its own places) and flowd must make it harmless instead: never follow the pointer,
    never write through the link. `what`: the `LaneEscape.what` the refusal is named as (None:
    not checked). `proof`: how tests/sandbox/test_escape_campaign.py sees that it landed:
    `same:<glob>` (every file there still byte-identical), `none:<glob>` (nothing made or
    changed there),
    `alive:editor`, `signal:runner`, `signal:victim`, `quiet:abstract`, `quiet:sock`,
    `gone:stay`, `string:<text>` (in no commit and no file of the run), `fsck` (the user's
    repository's `git fsck --full` as before), `victim` (the victim
    story done and never blamed), `branch:<story>:<other>` (no commit of that story's branch touches `<other>/`); `a|b`: both. `where`: what stops it, as docs/sandbox.md says."""

    name: str
    command: str
    refused: str | None
    what: str | None
    proof: str
    where: str


# The script every planted driver runs: it leaves a proof of who ran it, then does what git needs
# of that driver to go on (a filter passes the content through, gpg answers with a signature).
_HOOK = r"""#!/bin/sh
kind=$1; layer=$2; shift 2
touch "@P@/$kind-$layer-@T@"
case $kind in
filter) exec cat ;;
textconv) exec cat "$1" ;;
fsmonitor) exit 1 ;;
gpg) echo '[GNUPG:] SIG_CREATED D 1 8 00 0 X' >&2
     printf -- '-----BEGIN PGP SIGNATURE-----\nx\n-----END PGP SIGNATURE-----\n' ;;
esac
exit 0
"""
DRIVERS = ("fsmonitor", "filter", "external", "textconv", "gpg", "include", "hook")
LAYERS = ("wtconfig", "commondir", "dotgit", "lanerepo")
# Wrappers `$E/<driver>-<layer>` and a git config `$E/config-<layer>` that runs each of them.
_PROLOGUE = r"""E="${TMPDIR:-/tmp}/evil-@T@"; mkdir -p "$E"
ADMIN="$(git rev-parse --absolute-git-dir)"
cat > "$E/hook" <<'HOOK'
@HOOK@HOOK
chmod +x "$E/hook"
for layer in @LAYERS@; do
  for k in @DRIVERS@; do
    printf '#!/bin/sh\nexec "%s" %s %s "$@"\n' "$E/hook" "$k" "$layer" > "$E/$k-$layer"
    chmod +x "$E/$k-$layer"
  done
  mkdir -p "$E/hooks-$layer"
  for h in pre-commit post-commit post-checkout post-merge reference-transaction post-index-change; do
    cp "$E/hook-$layer" "$E/hooks-$layer/$h"
  done
  printf '[filter "inc"]\n\tclean = %s\n' "$E/include-$layer" > "$E/inc-$layer.cfg"
  printf '[core]\n\tfsmonitor = %s\n\thooksPath = %s\n[filter "evil"]\n\tclean = %s\n\tsmudge = %s\n[diff]\n\texternal = %s\n[diff "evil"]\n\ttextconv = %s\n[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = %s\n[include]\n\tpath = %s\n' \
    "$E/fsmonitor-$layer" "$E/hooks-$layer" "$E/filter-$layer" "$E/filter-$layer" "$E/external-$layer" \
    "$E/textconv-$layer" "$E/gpg-$layer" "$E/inc-$layer.cfg" > "$E/config-$layer"
done
"""

_OBJ = "the shared object store, read-only to a lane (its objects come in through its quarantine)"
_REF = "Landlock: the shared git dir is not the lane's (only its branch's ref and reflog are)"
_PIN = "flowd's own git names the lane's git dir, common dir and work tree itself"
_OFF = "flowd's own git runs with every configured command off"
_LINK = "flowd's git and file operations write no lane-planted link"
_WT = "git config --worktree"

SEALED: list[Technique] = [
    # The shared object store.
    Technique(
        "delete an object of the user's branch",
        "rm -f {C}/{OBJ}",
        "{C}/{OBJ}",
        "gitObjects",
        "same:{C}/{OBJ}",
        _OBJ,
    ),
    Technique(
        "overwrite an object (chmod u+w)",
        "chmod u+w {C}/{BLOB}; printf corrupt > {C}/{BLOB}",
        "{C}/{BLOB}",
        "gitObjects",
        "same:{C}/{BLOB}",
        _OBJ,
    ),
    Technique(
        "rename over an object",
        'printf corrupt > "$E/obj" && mv -f "$E/obj" {C}/{TREE}',
        "{C}/{TREE}",
        "gitObjects",
        "same:{C}/{TREE}",
        _OBJ,
    ),
    Technique(
        "a loose impostor of a packed object",
        "mkdir -p $(dirname {C}/{PACKED}); printf x > {C}/{PACKED}",
        "{C}/objects/",  # its folder is refused first (mkdir names it)
        "gitObjects",
        "none:{C}/{PACKED}",
        _OBJ,
    ),
    Technique(
        "delete a pack",
        "rm -f {C}/objects/pack/*.pack",
        "{C}/objects/pack/pack-",
        "gitObjects",
        "same:{C}/objects/pack/*.pack",
        _OBJ,
    ),
    Technique(
        "delete a pack index",
        "rm -f {C}/objects/pack/*.idx",
        "{C}/objects/pack/pack-",
        "gitObjects",
        "same:{C}/objects/pack/*.idx",
        _OBJ,
    ),
    Technique(
        "objects/info/alternates",
        'echo "$E" >> {C}/objects/info/alternates',
        "{C}/objects/info/alternates",
        "gitObjects",
        "none:{C}/objects/info/alternates",
        _OBJ,
    ),
    Technique(
        "objects/info/packs",
        "echo 'P pack-evil-{T}.pack' > {C}/objects/info/packs",
        "{C}/objects/info/packs",
        "gitObjects",
        "none:{C}/objects/info/packs",
        _OBJ,
    ),
    Technique(
        "a corrupt commit-graph",
        "printf CGPH > {C}/objects/info/commit-graph",
        "{C}/objects/info/commit-graph",
        "gitObjects",
        "none:{C}/objects/info/commit-graph",
        _OBJ,
    ),
    Technique("git prune --expire=now", "git prune --expire=now", None, None, "same:{C}/{DANGLING}", _OBJ),
    Technique("git repack -a -d", "git repack -a -d -q", None, None, "same:{C}/objects/pack/*", _OBJ),
    # Refs and reflogs of the shared git dir.
    Technique("delete a packed tag", "git tag -d v1", "{C}/", "gitRef", "same:{C}/packed-refs", _REF),
    Technique(
        "a loose ref over a packed tag",
        "git rev-parse HEAD > {C}/refs/tags/v1",
        "{C}/refs/tags/v1",
        "gitRef",
        "none:{C}/refs/tags/v1",
        _REF,
    ),
    Technique(
        "append to packed-refs",
        'echo "$(git rev-parse HEAD) refs/tags/evil-{T}" >> {C}/packed-refs',
        "{C}/packed-refs",
        "gitRef",
        "same:{C}/packed-refs",
        _REF,
    ),
    Technique("git pack-refs --all", "git pack-refs --all", "{C}/", "gitRef", "same:{C}/refs/heads/*", _REF),
    Technique("git stash drop", "git stash drop -q", "{C}/", None, "same:{C}/logs/refs/stash", _REF),
    Technique(
        "git reflog expire --all",
        "git reflog expire --expire=now --all",
        "{C}/",
        None,
        "same:{C}/logs/refs/heads/*",
        _REF,
    ),
    Technique(
        "append to the user's reflog",
        "echo evil >> {C}/logs/refs/heads/wip",
        "{C}/logs/refs/heads/wip",
        None,
        "same:{C}/logs/refs/heads/wip",
        _REF,
    ),
    Technique(
        "refs/replace",
        "git replace -f {WIP} HEAD",
        None,  # refused, but git says only "unable to create directory for …": no refusal to name
        None,
        "none:{C}/refs/replace/*",
        _REF,
    ),
    Technique("a shallow graft", "echo {WIP} > {C}/shallow", "{C}/shallow", None, "none:{C}/shallow", _REF),
    Technique(
        "ORIG_HEAD of the checkout",
        "git rev-parse HEAD > {C}/ORIG_HEAD",
        "{C}/ORIG_HEAD",
        None,
        "none:{C}/ORIG_HEAD",
        _REF,
    ),
    Technique(
        "FETCH_HEAD of the checkout",
        "git rev-parse HEAD > {C}/FETCH_HEAD",
        "{C}/FETCH_HEAD",
        None,
        "none:{C}/FETCH_HEAD",
        _REF,
    ),
    Technique(
        "a fake worktree admin dir",
        "mkdir {C}/worktrees/evil-{T}",
        "{C}/worktrees/evil-{T}",
        None,
        "none:{C}/worktrees/evil-{T}",
        _REF,
    ),
    # Processes and sockets of the user's, and of the other lanes.
    Technique(
        "SIGTERM the user's editor",
        "kill -TERM {EDITOR}",
        "a process",
        "signal",
        "alive:editor",
        "Landlock ABI 6 signal scope",
    ),
    Technique(
        "SIGTERM the user's editor from Python (os.kill)",
        'printf \'import os, signal\\nos.kill({EDITOR}, signal.SIGTERM)\\n\' > "$E/kill.py"; python3 "$E/kill.py"',
        "pid {EDITOR}",
        "signal",
        "alive:editor",
        "Landlock ABI 6 signal scope",
    ),
    Technique(
        "signal the flowd runner",
        "kill -{SIG} {RUNNER}",
        "a process",
        "signal",
        "signal:runner",
        "Landlock ABI 6 signal scope",
    ),
    Technique(
        "signal the victim lane's processes",
        "for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null | grep -q campaign-victim-lan[e]"
        " && kill -{VSIG} $(basename $d); done",
        "a process",
        "signal",
        "signal:victim",
        "Landlock ABI 6 signal scope",
    ),
    Technique(
        "an abstract unix socket of the user's",
        # Reported as a tool such as socat reports a refused connect.
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0{ABSTRACT}'); "
        "s.sendall(b'{T}')\" 2>&1 | tail -n 1 | sed 's/^/connect(@{ABSTRACT}): /'",
        "@{ABSTRACT}",
        "socket",
        "quiet:abstract",
        "Landlock ABI 6 abstract unix socket scope",
    ),
    Technique(
        "a unix socket file of the user's (ssh-agent)",
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{SOCK}'); "
        "s.sendall(b'{T}')\"",
        None,
        None,
        "quiet:sock",
        "what closes socket files here, else `; not sealed: socket files` in `flowd roster check`",
    ),
    Technique(
        "outlive the lane (no FLOWD_LANE, cwd /, setsid)",
        "(cd / && exec env -u FLOWD_LANE setsid sleep {STAY} > /dev/null 2>&1 &)",
        None,
        None,
        "gone:stay",
        "flowd's stray scan",
    ),
    Technique(
        "read flowd's environment",
        "cat /proc/{RUNNER}/environ > {OWN}/env-{T}.txt",
        None,
        None,
        "string:{SECRET}",
        "Landlock: no ptrace access to processes outside the domain",
    ),
    Technique(
        "write through flowd's open files",
        'for f in /proc/{RUNNER}/fd/*; do [ -f "$f" ] && echo CAMPAIGN-FD-{T} >> "$f"; done',
        None,
        None,
        "string:CAMPAIGN-FD-{T}",
        "Landlock: no ptrace access to processes outside the domain",
    ),
    Technique(
        "the editor's cwd through /proc",
        "echo x > /proc/{EDITOR}/cwd/PROCEDITOR-{T}.txt",
        None,
        None,
        "none:{R}/PROCEDITOR-{T}.txt",
        "Landlock: no ptrace access to processes outside the domain",
    ),
    # Shared caches: what another lane (or the user's next install) runs.
    Technique(
        "plant in ~/.cache/pip",
        "echo evil > {H}/.cache/pip/evil-{T}",
        "{H}/.cache/pip/evil-{T}",
        None,
        "none:{H}/.cache/pip/evil-{T}",
        "per-lane caches",
    ),
    Technique(
        "plant in ~/.npm",
        "echo evil > {H}/.npm/_cacache/evil-{T}",
        "{H}/.npm/_cacache/evil-{T}",
        None,
        "none:{H}/.npm/_cacache/evil-{T}",
        "per-lane caches",
    ),
]
# Last, in this order: the lane's own git admin files and the config git reads through them.
PLANTED: list[Technique] = [
    Technique(
        "a commit of the lane's whose blob is only in a store of its own, behind alternates",
        'Q="${{GIT_OBJECT_DIRECTORY:-$(git rev-parse --path-format=absolute --git-path objects)}}";'
        ' S="$E/hidden";'
        ' mkdir -p "$S"; B=$(echo hidden-{T} | GIT_OBJECT_DIRECTORY="$S" git hash-object -w --stdin);'
        ' echo "$S" >> "$Q/info/alternates"; git update-index --add --cacheinfo "100644,$B,{OWN}/hidden-{T}.txt"'
        ' && git commit -q -m "hidden {T}"',
        None,
        None,
        "fsck",
        "flowd takes a lane's commits as index-pack takes a pack: every object checked and copied",
    ),
    Technique(
        "config.worktree core.fsmonitor",
        f'{_WT} core.fsmonitor "$E/fsmonitor-wtconfig"',
        None,
        None,
        "none:{P}/fsmonitor-*-{T}",
        _OFF,
    ),
    Technique(
        "a .gitattributes filter driver",
        f'{_WT} filter.evil.clean "$E/filter-wtconfig"; {_WT} filter.evil.smudge "$E/filter-wtconfig";'
        " printf '* filter=evil diff=evil\\n*.inc.txt filter=inc\\n' > {OWN}/.gitattributes;"
        " echo x > {OWN}/x.inc.txt; echo x > {OWN}/x.txt",
        None,
        None,
        "none:{P}/filter-*-{T}",
        _OFF,
    ),
    Technique(
        "diff.external",
        f'{_WT} diff.external "$E/external-wtconfig"',
        None,
        None,
        "none:{P}/external-*-{T}",
        _OFF,
    ),
    Technique(
        "a .gitattributes textconv driver",
        f'{_WT} diff.evil.textconv "$E/textconv-wtconfig"',
        None,
        None,
        "none:{P}/textconv-*-{T}",
        _OFF,
    ),
    Technique(
        "commit.gpgSign with gpg.program",
        f'{_WT} commit.gpgSign true; {_WT} gpg.program "$E/gpg-wtconfig"',
        None,
        None,
        "none:{P}/gpg-*-{T}",
        _OFF,
    ),
    Technique(
        "include.path",
        f'{_WT} include.path "$E/inc-wtconfig.cfg"',
        None,
        None,
        "none:{P}/include-*-{T}",
        _OFF,
    ),
    Technique(
        "core.hooksPath in the lane",
        f'{_WT} core.hooksPath "$E/hooks-wtconfig"',
        None,
        None,
        "none:{P}/hook-*-{T}",
        _OFF,
    ),
    Technique(
        "the lane repository's own config and refs",
        'git config core.fsmonitor "$E/fsmonitor-lanerepo"; git config include.path "$E/config-lanerepo";'
        " git config user.name evil-{T}; git update-ref refs/heads/main " + _NEW + ";"
        " git branch -f epic/ep " + _NEW + "; git update-ref refs/heads/wip " + _NEW,
        None,
        None,
        "none:{P}/*-lanerepo-{T}|same:{C}/refs/heads/*",
        "flowd reads the lane repository as data and never runs git on it",
    ),
    Technique(
        "a link at a .worktreeinclude destination",
        "rm -f .env; ln -s {H}/.profile .env",
        None,
        None,
        "same:{H}/.profile",
        _LINK,
    ),
    Technique(
        "COMMIT_EDITMSG linked to ~/.bashrc",
        'ln -sf {H}/.bashrc "$ADMIN/COMMIT_EDITMSG"',
        None,
        None,
        "same:{H}/.bashrc",
        _LINK,
    ),
    Technique(
        "logs/HEAD linked to the user's reflog",
        'rm -f "$ADMIN/logs/HEAD"; ln -s {C}/logs/refs/heads/wip "$ADMIN/logs/HEAD"',
        None,
        None,
        "same:{C}/logs/refs/heads/wip",
        _LINK,
    ),
    Technique(
        "index linked to the user's index",
        'rm -f "$ADMIN/index"; ln -s {C}/index "$ADMIN/index"',
        None,
        None,
        "string:USER-STAGED-CONTENT",
        _LINK,
    ),
    Technique(
        "a .git file in a folder flowd reaps",
        'echo "gitdir: {PRECIOUS}" > {OWN}/.git',
        None,
        None,
        "same:{PRECIOUS}/*",
        "flowd reaps only the git dirs it made",
    ),
    Technique(
        "gitdir pointing at the victim lane", 'echo "{B}/.git" > "$ADMIN/gitdir"', None, None, "victim", _PIN
    ),
    Technique(
        "config.worktree core.worktree = the checkout",
        f"{_WT} core.worktree {{R}}",
        None,
        None,
        "same:{R}/*",
        _PIN,
    ),
    Technique(
        "commondir pointing at a fake common dir",
        'F="$E/common"; mkdir -p "$F/objects/info" "$F/logs"; cp -r {C}/refs "$F/";'
        ' cp {C}/packed-refs "$F/" 2>/dev/null; echo {C}/objects > "$F/objects/info/alternates";'
        ' cp "$E/config-commondir" "$F/config"; printf \'[extensions]\\n\\tworktreeConfig = true\\n\' >> "$F/config";'
        ' echo "ref: refs/heads/main" > "$F/HEAD"; echo "$F" > "$ADMIN/commondir"',
        None,
        None,
        "none:{P}/*-commondir-{T}",
        _PIN,
    ),
    Technique(
        "HEAD pointing at the user's branch",
        'echo "ref: refs/heads/wip" > "$ADMIN/HEAD"',
        None,
        None,
        "same:{C}/refs/heads/wip",
        _PIN,
    ),
    Technique(
        ".git file pointing at a fake admin dir",
        'G="$E/admin"; mkdir -p "$G/logs"; echo "ref: refs/heads/wip" > "$G/HEAD"; echo {C} > "$G/commondir";'
        ' cp "$ADMIN/index" "$G/index" 2>/dev/null; cp "$E/config-dotgit" "$G/config.worktree";'
        ' echo "{A}/.git" > "$G/gitdir"; echo "gitdir: $G" > {A}/.git',
        None,
        None,
        "none:{P}/*-dotgit-{T}",
        _PIN,
    ),
]
ALL_SEALED = SEALED + PLANTED
# A place of the lane's own that a later process of the same lane is granted by its path: planted
# by the story `nx`'s agent, written through by its task gate.
NEXT_STORY = "nx"
NEXT_PLANT = 'rm -rf "$(git rev-parse --absolute-git-dir)/flowd-tmp"; ln -s {R} "$(git rev-parse --absolute-git-dir)/flowd-tmp"'
NEXT_USE = 'echo x > "$TMPDIR/TMPLINK.txt"'
NEXT = Technique(
    "flowd-tmp linked to the checkout, then written by the lane's next process",
    NEXT_PLANT,
    None,
    None,
    "none:{R}/TMPLINK.txt",
    "confinement grants its rules' paths without following a link the lane made",
)
# The same `.git` file as PLANTED's, from `rp`, a story that otherwise finishes: its worktree goes to the
# trash when the run ends, and the trash is emptied with each worktree's private git dir.
REAP = Technique(
    "a .git file in a folder of a worktree flowd trashes",
    'echo "gitdir: {PRECIOUS}" > rp/.git',
    None,
    None,
    "same:{PRECIOUS}/*",
    "flowd reaps only the git dirs it made",
)
# The lane's own package cache folder, linked to a folder of the user's (`{PROJECTS}`), from `ck`,
# a story that otherwise finishes: its worktree is handed on as a spare to `cz`, which depends on
# it, and a lane's cache is made afresh, what was under `flowd-cache/` removed, when a lane starts.
CACHE_LINK = Technique(
    "flowd-cache linked to a folder of the user's, then handed on as a spare",
    'A="$(git rev-parse --absolute-git-dir)"; rm -rf "$A/flowd-cache"; ln -s {PROJECTS} "$A/flowd-cache"',
    None,
    None,
    "same:{PROJECTS}/*/*",
    "flowd's file operations follow no link a lane planted",
)
# A patient attacker: it waits (30 s at most) until the victim's worktree is there.
WAIT_FOR_B = "for i in $(seq 300); do [ -f {B}/.git ] && break; sleep 0.1; done; "
# The lane's `HEAD` pointed at the victim's branch, from `hx`: flowd's own commit of `hx`'s work
# (and the reflog the confinement grants by `HEAD`) must not land on `story/<epic>/b`.
HEAD_OTHER = Technique(
    "HEAD pointing at the victim lane's branch",
    WAIT_FOR_B + 'echo "ref: refs/heads/story/ep/b" > "$(git rev-parse --absolute-git-dir)/HEAD"',
    None,
    None,
    "branch:b:hx",
    "flowd's own git names the lane's git dir, common dir and work tree itself",
)
# The lane's `.git` file pointed at the victim lane's private git dir, from `gx`: its next process
# (its task gate) writes there, as confinement grants a lane its admin dir by what `.git` says.
GITDIR_OTHER = Technique(
    ".git file pointing at the victim lane's admin dir, then written by the lane's next process",
    WAIT_FOR_B + 'echo "gitdir: {C}/worktrees/b" > .git',
    None,
    None,
    "string:GITDIR-OTHER-LANDED|branch:b:gx",
    "confinement grants a lane only its own admin dir",
)
# What it wrote there is gone with that dir when the victim's worktree is removed: it says so in its
# own folder (a word made at run time, so no log of the command holds it).
GITDIR_USE = (
    "mkdir -p gx; echo x > {C}/worktrees/b/INTRUDER-gx.txt && echo GITDIR-OTHER-$(echo landed | tr a-z A-Z)"
    " > gx/landed; echo done > gx/done"
)
# A `.worktreeinclude`d file (the user's ignored `.env`) planted for the next lane, from `ev`, whose
# worktree is handed on as a spare to `ez`; `ez`'s agent keeps what it found in `ez/env-seen.txt`.
SPARE_ENV = Technique(
    "a .worktreeinclude'd file planted for the story that takes the worktree next",
    'echo "PLANTED-BY-$(echo ev | tr a-z A-Z)" > .env',
    None,
    None,
    "string:PLANTED-BY-EV",
    "a spare keeps nothing the previous lane wrote",
)
# A submodule whose `.gitmodules` names a command (`update = !…`, an `ext::` URL), from `sm` (it
# owns `.gitmodules`), with a local copy of the commit planted in its own admin dir, where flowd
# looks for one (`worktrees/*/modules/<name>`): flowd checks submodules out, unconfined, in every
# merge train candidate that holds the story.
SUBMODULE = Technique(
    "a submodule whose .gitmodules names commands",
    'A="$(git rev-parse --absolute-git-dir)"; git clone -q --bare {R} "$A/modules/sub";'
    " printf '[submodule \"sub\"]\\n\\tpath = sm/sub\\n\\turl = %s\\n\\tupdate = %s\\n'"
    " 'ext::sh -c touch% {P}/submodule-ext' '!touch {P}/submodule-update' > .gitmodules;"
    " mkdir -p sm/sub; git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sm/sub",
    None,
    None,
    "none:{P}/submodule-*",
    "git refuses them; flowd's own submodule checkout runs with every configured command off",
)
OWNS = {"sm": [".gitmodules", "sm/"]}
# Each planted by its own story's agent (so that one landing cannot keep another from being tried).
NEXT_TECHNIQUES = {
    NEXT_STORY: NEXT,
    "rp": REAP,
    "ck": CACHE_LINK,
    "hx": HEAD_OTHER,
    "gx": GITDIR_OTHER,
    "ev": SPARE_ENV,
    "sm": SUBMODULE,
}
# Stories that start after another ends (each depends on it), in its worktree.
HANDED_ON = {"cz": "ck", "ez": "ev"}
# Where the sealed campaign is tried from: the tag, and the story whose process runs it.
ORIGINS = {"agent": "ag", "gate": "gt", "setup": "su", "epic": "ea"}


def sealed_script(places: dict[str, str], tag: str) -> str:
    """One origin's sealed campaign. It acts only where that origin's attacker runs: the story's
    worktree, or (`epic`) a merge train candidate holding the story `ea`; every step says its
    name first, and the attacker's done-mark lets the victim finish its turn."""
    story = ORIGINS[tag]
    if tag == "epic":
        where = 'case "$PWD" in */_train/*) [ -f ea/ea.txt ] || exit 0 ;; *) exit 0 ;; esac'
    else:
        where = f'[ "$PWD" = "{places["A"]}/{story}" ] || exit 0'
    at = {**places, "A": f"{places['A']}/{story}" if tag != "epic" else "$PWD", "OWN": story}
    prologue = (
        _PROLOGUE.replace("@HOOK@", _HOOK).replace("@LAYERS@", " ".join(LAYERS))
        .replace("@DRIVERS@", " ".join(DRIVERS)).replace("@P@", places["P"]).replace("@T@", tag)
    )  # fmt: skip
    lines = ["#!/bin/sh"]
    if tag == "gate":  # the second half of NEXT and GITDIR_OTHER: the lane's next process, its task gate
        use = fill(GITDIR_USE, places, tag)
        lines += [
            f'if [ "$PWD" = "{places["A"]}/{NEXT_STORY}" ]; then {{ {NEXT_USE} ; }} 2>&1; exit 0; fi',
            f'if [ "$PWD" = "{places["A"]}/gx" ]; then {{ {use} ; }} 2>&1; exit 0; fi',
        ]
    lines += [where, f"mkdir -p {story}", prologue]
    for technique in SEALED:
        lines += [
            f"echo {shlex.quote('== ' + technique.name)}",
            f"{{ {fill(technique.command, at, tag)} ; }} 2>&1",
        ]
    lines.append(f"echo done > {story}/done-{tag}")
    for technique in PLANTED:
        lines += [
            f"echo {shlex.quote('== ' + technique.name)}",
            f"{{ {fill(technique.command, at, tag)} ; }} 2>&1",
        ]
    return "\n".join([*lines, "exit 0"]) + "\n"


def write_sealed_scripts(root: Path, places: dict[str, dict[str, str]]) -> dict[str, Path]:
    """Each origin's script, from that origin's places, and what NEXT_TECHNIQUES' stories' agents run."""
    paths: dict[str, Path] = {}
    for sid, t in NEXT_TECHNIQUES.items():
        paths[sid] = root / f"sealed-{sid}.sh"
        plant = f"{{ {fill(t.command, places['agent'], sid)} ; }} 2>&1"
        paths[sid].write_text(f"#!/bin/sh\nmkdir -p {sid}\n{plant}\n", encoding="utf-8")
    for tag in ORIGINS:
        path = root / f"sealed-{tag}.sh"
        path.write_text(sealed_script(places[tag], tag), encoding="utf-8")
        paths[tag] = path
    return paths
