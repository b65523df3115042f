"""`flowd answer RUN_ID [--story ID] TEXT`: answer a paused story or run (docs/answers.md).

The answer travels to the live run through its inbox (`flowd/store/inbox.py`); the run says what it
made of it. Exit 0 when the run took it, 2 when there is nothing paused there or the answer does
not fit the pause (one sentence, nothing changed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowd.base.errors import EXIT_BAD_INPUT, EXIT_OK, InputError
from flowd.store.inbox import Answer, Reply, Revision, post
from flowd.vcs.gitops import Repo


def post_here_or_by_daemon(repo: Repo, run_id: str, request: Answer | Revision) -> Reply:
    """Hand `request` to the run through the repository's daemon when one runs (docs/editors.md),
    else straight to its inbox: the same reply, and the same errors, either way."""
    from flowd.daemon.client import request as ask

    if repo.git_dir == repo.common_dir:
        answered = ask(repo.root, "post", {"runId": run_id, "request": request.wire()})
        if answered is not None:
            return Reply(ok=bool(answered.get("ok")), message=str(answered.get("message")))
    return post(repo.root, run_id, request)


def answer_command(args: argparse.Namespace) -> int:
    repo = Repo.discover(Path.cwd())
    text = " ".join(args.text).strip()
    if not text:
        raise InputError(
            "the answer is empty; give `raise N`, `stop`, `wait`, `approve` or the text the coder needs"
        )
    reply = post_here_or_by_daemon(repo, args.run_id, Answer(story=args.story, answer=text, by="cli"))
    if not reply.ok:
        print(f"flowd: {reply.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(reply.message)
    return EXIT_OK
