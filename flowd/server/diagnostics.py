"""Diagnostics (docs/protocol.md): pure builders and a store that merges every cause per file.

Each cause owns a key (`("plan", uri)`, `("perimeter", runId, lane)`, `("owned", uri)`, ...).
Publishing always sends the full list for a URI, merged over keys, so one cause going away (a
path restored, a run ended, a plan fixed) clears only its own entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

if TYPE_CHECKING:
    from flowd.plan.violation import Violation

SOURCE = "flowd"
Key = tuple[str, ...]

_FIRST_LINE = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=1, character=0))

_PERIMETER_TEXT = {
    "outside": "outside its perimeter",
    "sharedReadOnly": "which it declared shared read-only",
    "foreignOwned": "which another story owns",
}


def file_uri(path: Path | str) -> str:
    uri = from_fs_path(str(path))
    assert uri is not None  # only None for non-file paths, which we never build
    return str(uri)


def plan_diagnostics(violations: Iterable[Violation]) -> list[lsp.Diagnostic]:
    """A plan's violations at their story or field (0-based positions, as the parser gives them)."""
    out = []
    for v in violations:
        line, column = v.line or 0, v.column or 0
        end_line = v.end_line if v.end_line is not None else line
        end_column = v.end_column if v.end_column is not None else column
        if (end_line, end_column) < (line, column):
            end_line, end_column = line, column
        data: dict[str, Any] = {}
        if v.story is not None:
            data["story"] = v.story
        if v.field is not None:
            data["field"] = v.field
        out.append(
            lsp.Diagnostic(
                range=lsp.Range(
                    start=lsp.Position(line=line, character=column),
                    end=lsp.Position(line=end_line, character=end_column),
                ),
                message=v.message,
                severity=lsp.DiagnosticSeverity.Error,
                source=SOURCE,
                code=v.code,
                data=data or None,
            )
        )
    return out


def _mirrored(
    *,
    code: str,
    severity: lsp.DiagnosticSeverity,
    message: str,
    mirror_message: str,
    related_message: str,
    data: dict[str, Any],
    path: str,
    worktree: Path | None,
    checkout: Path,
) -> list[tuple[str, lsp.Diagnostic]]:
    """A diagnostic on the worktree file (when the worktree is known) and, mirrored with a link to
    it, on the same path in the user's checkout."""
    out: list[tuple[str, lsp.Diagnostic]] = []
    related = None
    if worktree is not None:
        wt_uri = file_uri(worktree / path)
        at_worktree = lsp.Diagnostic(
            range=_FIRST_LINE,
            message=message,
            severity=severity,
            source=SOURCE,
            code=code,
            data={**data, "mirror": False},
        )
        out.append((wt_uri, at_worktree))
        related = [
            lsp.DiagnosticRelatedInformation(
                location=lsp.Location(uri=wt_uri, range=_FIRST_LINE), message=related_message
            )
        ]
    mirrored = lsp.Diagnostic(
        range=_FIRST_LINE,
        message=mirror_message if worktree is not None else message,
        severity=severity,
        source=SOURCE,
        code=code,
        data={**data, "mirror": worktree is not None},
        related_information=related,
    )
    out.append((file_uri(checkout / path), mirrored))
    return out


def perimeter_pair(
    *,
    kind: str,
    story: str,
    run_id: str,
    path: str,
    worktree: Path,
    checkout: Path,
    owner: str | None = None,
) -> list[tuple[str, lsp.Diagnostic]]:
    """A perimeter violation on the worktree file and, mirrored, on the same path in the checkout."""
    what = _PERIMETER_TEXT.get(kind, "outside its perimeter")
    if kind == "foreignOwned" and owner:
        what = f"which story '{owner}' owns"
    message = f"story '{story}' changed {path}, {what}"
    return _mirrored(
        code=f"perimeter.{kind}",
        severity=lsp.DiagnosticSeverity.Error,
        message=message,
        mirror_message=f"{message} (in its worktree, run {run_id})",
        related_message=f"the change in story '{story}''s worktree",
        data={"story": story, "runId": run_id, "path": path},
        path=path,
        worktree=worktree,
        checkout=checkout,
    )


def task_owns_pair(
    *, story: str, task: str, run_id: str, path: str, worktree: Path | None, checkout: Path
) -> list[tuple[str, lsp.Diagnostic]]:
    message = f"task '{task}' of story '{story}' changed {path}, outside its Owns: list"
    return _mirrored(
        code="task.owns",
        severity=lsp.DiagnosticSeverity.Warning,
        message=message,
        mirror_message=message,
        related_message="the change in the worktree",
        data={"story": story, "runId": run_id, "path": path, "task": task},
        path=path,
        worktree=worktree,
        checkout=checkout,
    )


def owned_by_running(path: str, story: str, run_id: str) -> lsp.Diagnostic:
    return lsp.Diagnostic(
        range=_FIRST_LINE,
        message=f"{path} is owned by story '{story}', running now (run {run_id}); "
        "your change may conflict with its merge",
        severity=lsp.DiagnosticSeverity.Warning,
        source=SOURCE,
        code="perimeter.ownedByRunningStory",
        data={"story": story, "runId": run_id, "path": path},
    )


class DiagnosticStore:
    """Diagnostics per (cause key, uri); publishes the merged list of a uri whenever it changes."""

    def __init__(self, publish: Callable[[str, list[lsp.Diagnostic]], None]) -> None:
        self._publish = publish
        self._by_uri: dict[str, dict[Key, list[lsp.Diagnostic]]] = {}

    def put(self, key: Key, uri: str, diagnostics: list[lsp.Diagnostic]) -> None:
        entries = self._by_uri.setdefault(uri, {})
        if not diagnostics and key not in entries:
            return
        if entries.get(key) == diagnostics:
            return
        if diagnostics:
            entries[key] = diagnostics
        else:
            entries.pop(key, None)
        self._send(uri)

    def replace(self, key: Key, items: Iterable[tuple[str, lsp.Diagnostic]]) -> None:
        """Make `key`'s diagnostics exactly `items` across all uris (others of the key clear)."""
        grouped: dict[str, list[lsp.Diagnostic]] = {}
        for uri, diagnostic in items:
            grouped.setdefault(uri, []).append(diagnostic)
        for uri in [u for u, entries in self._by_uri.items() if key in entries and u not in grouped]:
            self.put(key, uri, [])
        for uri, diagnostics in grouped.items():
            self.put(key, uri, diagnostics)

    def clear(self, prefix: Key) -> None:
        """Remove every key starting with `prefix` (a run ended: `("perimeter", runId)`)."""
        n = len(prefix)
        for uri, entries in list(self._by_uri.items()):
            gone = [k for k in entries if k[:n] == prefix]
            if gone:
                for k in gone:
                    del entries[k]
                self._send(uri)

    def items(self, kinds: tuple[str, ...]) -> list[tuple[str, Key, lsp.Diagnostic]]:
        return [
            (uri, key, d)
            for uri, entries in self._by_uri.items()
            for key, diagnostics in entries.items()
            if key[0] in kinds
            for d in diagnostics
        ]

    def republish(self) -> None:
        """Send every file's diagnostics again (a client that fell behind)."""
        for uri in list(self._by_uri):
            self._send(uri)

    def keys(self, kind: str) -> set[Key]:
        return {k for entries in self._by_uri.values() for k in entries if k[0] == kind}

    def _send(self, uri: str) -> None:
        entries = self._by_uri.get(uri, {})
        merged = [d for diagnostics in entries.values() for d in diagnostics]
        if not entries:
            self._by_uri.pop(uri, None)
        self._publish(uri, merged)
