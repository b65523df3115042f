"""Plan diagnostics (`plan.*`) on plan files, and what a `plan` argument names (docs/protocol.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pygls.uris import to_fs_path

from flowd.server import diagnostics as diag
from flowd.server.features import Feature, open_document


def is_plan(path: Path, text: str) -> bool:
    """A story plan: `*.epic.json`, or Markdown holding a ```json storyplan block."""
    from flowd.plan.parse import is_markdown

    if path.name.lower().endswith(".epic.json"):
        return True
    return is_markdown(path, text) and "```json" in text and "storyplan" in text


class PlanDiagnostics(Feature):
    def resolve(self, method: str, raw: str) -> Path:
        """A plan argument: an absolute path, a file:// URI, or relative to the workspace root
        (the root the client opened, which may be a story worktree, not the repository)."""
        from flowd.server.params import invalid

        if raw.startswith("file:"):
            path_text = to_fs_path(raw)
            if not path_text:
                raise invalid(method, f"plan: {raw!r} is not a usable file URI")
            path = Path(path_text)
        elif "://" in raw:
            raise invalid(method, f"plan: {raw!r} is neither a path nor a file:// URI")
        else:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                path = self.server.root / path
        # Anywhere on disk, as `flowd run` accepts (docs/protocol.md): the server runs as the user,
        # and over TCP only a client holding the user's token gets this far.
        resolved = path.resolve()
        if resolved.is_dir():
            raise invalid(
                method, f"plan: {resolved} is a directory; give the plan file (*.epic.json or *.md)"
            )
        if not resolved.is_file():
            raise invalid(method, f"plan: no such plan file {resolved}; check the path (it may have moved)")
        return resolved

    def violations(self, path: Path) -> list[Any]:
        """Violations of a plan file, from the editor's text when it is open there."""
        from flowd.plan.parse import check_plan_file, check_text, is_markdown

        document = open_document(self.server, diag.file_uri(path))
        if document is not None:
            text = document.source
            return check_text(text, markdown=is_markdown(path, text))[1]
        return check_plan_file(path)

    def publish(self, uri: str, violations: list[Any]) -> None:
        self.server.diags.put(("plan", uri), uri, diag.plan_diagnostics(violations))

    def check_path(self, path: Path) -> list[Any]:
        """Check a plan file and show its violations on it."""
        found = self.violations(path)
        self.publish(diag.file_uri(path), found)
        return found

    # -- documents -----------------------------------------------------------------------------
    def changed(self, uri: str) -> None:
        """didOpen/didChange: the document's diagnostics, when it is a plan."""
        from flowd.plan.parse import check_text, is_markdown

        document = open_document(self.server, uri)
        path_text = to_fs_path(uri)
        if document is None or path_text is None:
            return
        path = Path(path_text)
        if is_plan(path, document.source):
            self.publish(uri, check_text(document.source, markdown=is_markdown(path, document.source))[1])

    def closed(self, uri: str) -> None:
        self.server.diags.put(("plan", uri), uri, [])
