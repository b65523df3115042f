"""The escape campaign (docs/sandbox.md): the ways a lane's process might reach past its story,
as one shell script a scripted agent's turn and a task gate both run.

Each technique is (name, command, the path its refusal names). `{R}` is the user's checkout,
`{C}` the repository's common git dir, `{H}` the home directory, `{B}` the victim story's
worktree, `{E}` the epic worktree, `{T}` the tag (`agent` or `gate`), `{UP}` the `..` path from
the attacker's worktree to the checkout. Every command is independent of the others.
"""

from __future__ import annotations

from pathlib import Path

SECRET = "CAMPAIGN-SECRET-KEY-0123456789"

TECHNIQUES: list[tuple[str, str, str]] = [
    ("absolute redirect", "echo x > {R}/ABS-{T}.txt", "{R}/ABS-{T}.txt"),
    ("dot-dot", "echo x > {UP}/DOTDOT-{T}.txt", "DOTDOT-{T}.txt"),
    ("symlink out", 'ln -s {R}/SYM-{T}.txt "$TMPDIR/link-{T}" && echo x > "$TMPDIR/link-{T}"', "link-{T}"),
    ("hardlink", 'ln {R}/README.md "$TMPDIR/hard-{T}" && echo x >> "$TMPDIR/hard-{T}"', "{R}/README.md"),
    ("/proc/self/cwd", "echo x > /proc/self/cwd/{UP}/PROC-{T}.txt", "PROC-{T}.txt"),
    ("/proc/<pid>/root", "echo x > /proc/$$/root{R}/ROOT-{T}.txt", "ROOT-{T}.txt"),
    ("git -C checkout", "git -C {R} branch evil-{T}", "refs/heads/evil-{T}"),
    ("git config local", "git config user.name evil-{T}", "{C}/config"),
    ("git config --global", "git config --global user.name evil-{T}", "{H}/.gitconfig"),
    ("core.hooksPath", "git config core.hooksPath /tmp/hooks-{T}", "{C}/config"),
    ("hook file", "printf '#!/bin/sh\\necho pwned\\n' > {C}/hooks/post-checkout", "{C}/hooks/post-checkout"),
    ("info/exclude", "echo evil >> {C}/info/exclude", "{C}/info/exclude"),
    ("update-ref main", "git update-ref refs/heads/main HEAD", "{C}/refs/heads/main"),
    ("branch -f main", "git branch -f main HEAD", "{C}/refs/heads/main"),
    ("update-ref epic", "git update-ref refs/heads/epic/ep HEAD", "{C}/refs/heads/epic/ep"),
    ("branch -f epic/*", "git branch -f epic/evil-{T} HEAD", "{C}/refs/heads/epic/evil-{T}"),
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
