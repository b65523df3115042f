"""The diagnostics store merges causes per file and clears one cause without touching others."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types as lsp

from flowd.plan.violation import Violation
from flowd.server.diagnostics import DiagnosticStore, owned_by_running, perimeter_pair, plan_diagnostics


def test_causes_merge_per_uri_and_clear_by_prefix() -> None:
    published: list[tuple[str, list[lsp.Diagnostic]]] = []
    store = DiagnosticStore(lambda uri, ds: published.append((uri, ds)))
    pair = perimeter_pair(
        kind="outside",
        story="docs",
        run_id="r1",
        path="README.md",
        worktree=Path("/wt"),
        checkout=Path("/repo"),
    )
    store.replace(("perimeter", "r1", "docs"), pair)
    store.put(
        ("owned", "file:///repo/README.md"),
        "file:///repo/README.md",
        [owned_by_running("README.md", "x", "r2")],
    )
    assert published[-1][0] == "file:///repo/README.md" and len(published[-1][1]) == 2
    mirrored = next(
        d
        for uri, ds in published
        if uri == "file:///repo/README.md"
        for d in ds
        if d.code == "perimeter.outside"
    )
    assert (
        mirrored.related_information
        and mirrored.related_information[0].location.uri == "file:///wt/README.md"
    )

    store.clear(("perimeter", "r1"))
    assert published[-2] == ("file:///wt/README.md", [])
    assert [d.code for d in published[-1][1]] == ["perimeter.ownedByRunningStory"]
    # Unchanged content is not re-published.
    count = len(published)
    store.put(
        ("owned", "file:///repo/README.md"),
        "file:///repo/README.md",
        [owned_by_running("README.md", "x", "r2")],
    )
    assert len(published) == count


def test_plan_violations_keep_their_positions() -> None:
    (d,) = plan_diagnostics(
        [
            Violation(
                message="m",
                code="plan.badId",
                story="s",
                field="id",
                line=3,
                column=4,
                end_line=3,
                end_column=9,
            )
        ]
    )
    assert (d.range.start.line, d.range.start.character, d.range.end.character) == (3, 4, 9)
    assert d.code == "plan.badId" and d.source == "flowd" and d.severity == lsp.DiagnosticSeverity.Error
