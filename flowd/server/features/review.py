"""`flow.addRevision`: a review comment from the editor becomes a revision task for a story of a
live run (docs/answers.md: revisions). The file is named by URI; `flowd/control/revise.py` maps it to the
repository path (a story worktree's file is that story's path) and `flowd/store/inbox.py` hands the
request to the run, whose reply is the answer: a result when the story took it, else an error."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from pygls.uris import to_fs_path

from flowd import protocol
from flowd.base.errors import InputError
from flowd.server.app import request_failed
from flowd.server.features import Feature

if TYPE_CHECKING:
    from flowd.protocol.models import AddRevisionArgs

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")


def uri_to_given(uri: str) -> str | None:
    """A `file://` URI to its path; an absolute or repository-relative path as it is; None for
    another scheme (a diff view's `git:` URI: the client sends the file's own URI)."""
    if uri.startswith("file:"):
        return to_fs_path(uri) or None
    return None if _SCHEME.match(uri) else uri


class Revisions(Feature):
    async def add_revision(self, p: AddRevisionArgs) -> dict[str, Any]:
        from flowd.control.revise import revision_request
        from flowd.protocol.models import AddRevisionResult
        from flowd.server.params import invalid
        from flowd.store.inbox import post_async
        from flowd.trace.log import load_run_record

        name = protocol.ADD_REVISION.name
        repo = self.server.need_repo()
        if await asyncio.to_thread(load_run_record, repo.root, p.run_id) is None:
            raise invalid(name, f"runId: unknown run {p.run_id!r}")
        given = uri_to_given(p.uri)
        if given is None:
            raise invalid(name, f"uri: {p.uri!r} is not a file URI or a path of the repository")
        try:
            request = await asyncio.to_thread(
                revision_request, repo, p.story, given, p.line, p.text, "editor"
            )
        except InputError as exc:
            raise invalid(name, str(exc))
        try:
            reply = await post_async(repo.root, p.run_id, request)
        except InputError as exc:
            raise request_failed(f"{name}: {exc}")
        if not reply.ok:
            raise request_failed(f"{name}: {reply.message}")
        return AddRevisionResult(
            run_id=p.run_id, story=p.story, path=request.path, line=p.line, message=reply.message
        ).wire()
