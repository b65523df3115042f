"""The epic graph and timeline as pictures (docs/graph.md): Mermaid blocks for `report.md` (a
`flowchart LR` and a `gantt`, which GitHub renders) and a self-contained `report.html` drawing the
same as inline SVG, laid out here, with no script and no remote asset.

Pure: the `flow/graph` and `flow/timeline` shapes in, text out.
"""

from __future__ import annotations

import re
from html import escape

from flowd.base.timeutil import parse_iso
from flowd.protocol.models import GraphResult, GraphStory, TimelineLane, TimelineResult

# Fill colours by status and by phase. report.html has a palette per colour scheme (CSS classes
# under `prefers-color-scheme` override the SVG's fill attributes, which stay the light palette
# for viewers without CSS); Mermaid's classDefs cannot follow the page's theme (GitHub draws the
# same block on a white or a near-black page), so they use mid-tone fills under white text, which
# stand out on both.
STATUS_FILL = {
    "planned": "#e5e7eb",
    "active": "#bfdbfe",
    "queued": "#fde68a",
    "merging": "#fdba74",
    "ready": "#ddd6fe",
    "waiting": "#fde68a",
    "done": "#bbf7d0",
    "failed": "#fecaca",
    "skipped": "#d1d5db",
}
STATUS_FILL_DARK = {
    "planned": "#374151",
    "active": "#1e3a8a",
    "queued": "#713f12",
    "merging": "#7c2d12",
    "ready": "#4c1d95",
    "waiting": "#713f12",
    "done": "#14532d",
    "failed": "#7f1d1d",
    "skipped": "#374151",
}
MERMAID_FILL = {
    "planned": "#6b7280",
    "active": "#1d4ed8",
    "queued": "#a16207",
    "merging": "#c2410c",
    "ready": "#6d28d9",
    "waiting": "#a16207",
    "done": "#15803d",
    "failed": "#b91c1c",
    "skipped": "#4b5563",
}
PHASE_FILL = {
    "planned": "#e5e7eb",
    "coding": "#93c5fd",
    "gated": "#c4b5fd",
    "queued": "#fde68a",
    "merging": "#fdba74",
    "merged": "#16a34a",
    "paused": "#fcd34d",
    "failed": "#dc2626",
}
PHASE_FILL_DARK = {
    "planned": "#4b5563",
    "coding": "#2563eb",
    "gated": "#7c3aed",
    "queued": "#ca8a04",
    "merging": "#ea580c",
    "merged": "#22c55e",
    "paused": "#eab308",
    "failed": "#ef4444",
}
CRITICAL = "#b91c1c"
# The critical path's outline in Mermaid: amber shows on white and on near-black, and apart from
# the red of a failed story's fill.
MERMAID_CRITICAL = "#f59e0b"


# -- Mermaid ---------------------------------------------------------------------------------
def _label(text: str) -> str:
    """Text inside a quoted Mermaid label: quotes, entity starts and markup written as entities
    (Mermaid renders labels as HTML)."""
    text = " ".join(text.split()).replace("#", "#35;").replace('"', "#quot;")
    return text.replace("<", "#lt;").replace(">", "#gt;")


def _node_ids(graph: GraphResult) -> dict[str, str]:
    # Story ids may hold characters Mermaid reads as syntax: nodes get ids of their own.
    return {s.id: f"s{n}" for n, s in enumerate(graph.stories)}


def mermaid_graph(graph: GraphResult) -> str:
    """A `flowchart LR`: nodes coloured by status, the critical path thick and outlined."""
    ids = _node_ids(graph)
    critical = {s.id for s in graph.stories if s.critical}
    lines = ["flowchart LR"]
    for s in graph.stories:
        lines.append(f'  {ids[s.id]}["{_label(s.id)}: {_label(s.title)}<br/>{s.status}"]:::{_css(s.status)}')
    for s in graph.stories:
        for dep in s.depends_on:
            arrow = "==>" if dep in critical and s.id in critical else "-->"
            lines.append(f"  {ids[dep]} {arrow} {ids[s.id]}")
    for status in sorted({s.status for s in graph.stories}):
        fill = MERMAID_FILL.get(status, "#6b7280")
        lines.append(f"  classDef {_css(status)} fill:{fill},stroke:{fill},color:#ffffff")
    if critical:
        lines.append(f"  classDef critical stroke:{MERMAID_CRITICAL},stroke-width:3px")
        lines.append(f"  class {','.join(ids[s] for s in ids if s in critical)} critical")
    return "\n".join(lines)


def _css(status: str) -> str:
    return "st_" + re.sub(r"[^A-Za-z0-9_]", "_", status)


def _ms(at: str) -> int:
    return int(parse_iso(at).timestamp() * 1000)


def _bounds(timeline: TimelineResult) -> tuple[int, int] | None:
    """(first, last) time on the timeline in epoch ms; a phase that lasts ends at the last."""
    times = [_ms(t) for lane in timeline.lanes for p in lane.phases for t in (p.start, p.end) if t]
    times += [_ms(t) for t in (timeline.started_at, timeline.ended_at) if t]
    return (min(times), max(times)) if times else None


def mermaid_gantt(timeline: TimelineResult) -> str:
    """A `gantt` with one section per lane and one bar per phase (merged and failed: milestones)."""
    lines = ["gantt", "  title Timeline", "  dateFormat x", "  axisFormat %H:%M:%S"]
    bounds = _bounds(timeline)
    if bounds is None:
        return "\n".join(lines)
    n = 0
    for lane in timeline.lanes:
        lines.append(f"  section {_plain(lane.lane)}")
        for p in lane.phases:
            start = _ms(p.start)
            n += 1
            if p.phase in ("merged", "failed"):
                fields = ["milestone", *_tags(p.phase), f"p{n}", str(start), "0ms"]
            else:
                end = max(_ms(p.end) if p.end else bounds[1], start + 1)
                fields = [*_tags(p.phase), f"p{n}", str(start), str(end)]
            lines.append(f"  {p.phase} :{', '.join(fields)}")
    return "\n".join(lines)


def _tags(phase: str) -> list[str]:
    """Mermaid's own task tags, for phases worth telling apart without colour."""
    return {"failed": ["crit"], "paused": ["active"], "merged": ["done"]}.get(phase, [])


def _plain(text: str) -> str:
    """A gantt section name: no characters the gantt grammar reads (`:`, `#`, `;`)."""
    return re.sub(r"[:#;]", "_", " ".join(text.split())) or "_"


def mermaid_blocks(graph: GraphResult, timeline: TimelineResult) -> list[str]:
    """The report's `## Graph` and `## Timeline` sections."""
    return [
        "",
        "## Graph",
        "",
        "Stories by status; the critical path is drawn thick (docs/graph.md).",
        "",
        "```mermaid",
        mermaid_graph(graph),
        "```",
        "",
        "## Timeline",
        "",
        "```mermaid",
        mermaid_gantt(timeline),
        "```",
    ]


# -- SVG ---------------------------------------------------------------------------------------
NODE_W, NODE_H, COL_W, ROW_H = 170, 48, 220, 70


def layers(graph: GraphResult) -> list[list[GraphStory]]:
    """Stories by depth (longest chain of dependencies before them), plan order within a layer."""
    by_id = {s.id: s for s in graph.stories}
    depth: dict[str, int] = {}

    def of(story_id: str, seen: frozenset[str]) -> int:
        if story_id in depth:
            return depth[story_id]
        deps = [d for d in by_id[story_id].depends_on if d in by_id and d not in seen]
        depth[story_id] = 1 + max((of(d, seen | {story_id}) for d in deps), default=-1)
        return depth[story_id]

    for s in graph.stories:
        of(s.id, frozenset())
    out: list[list[GraphStory]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for s in graph.stories:
        out[depth[s.id]].append(s)
    return out


def svg_graph(graph: GraphResult) -> str:
    where: dict[str, tuple[int, int]] = {}
    cols = layers(graph)
    for x, col in enumerate(cols):
        for y, s in enumerate(col):
            where[s.id] = (20 + x * COL_W, 20 + y * ROW_H)
    width = 40 + max(len(cols) - 1, 0) * COL_W + NODE_W
    height = 40 + max((len(c) for c in cols), default=0) * ROW_H
    parts = [
        f'<svg class="graph" role="img" aria-label="epic graph" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" '
        'markerWidth="9" markerHeight="9" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>',
    ]
    critical = {s.id for s in graph.stories if s.critical}
    for s in graph.stories:
        for dep in s.depends_on:
            if dep in where:
                parts.append(_edge(where[dep], where[s.id], dep in critical and s.id in critical))
    for s in graph.stories:
        parts.append(_node(s, *where[s.id]))
    parts.append("</svg>")
    return "\n".join(parts)


def _edge(a: tuple[int, int], b: tuple[int, int], critical: bool) -> str:
    x1, y1, x2, y2 = a[0] + NODE_W, a[1] + NODE_H // 2, b[0], b[1] + NODE_H // 2
    mid = (x1 + x2) // 2
    style = (
        f'stroke="{CRITICAL}" stroke-width="3"' if critical else 'stroke="currentColor" stroke-width="1.5"'
    )
    return (
        f'<path class="edge{" critical" if critical else ""}" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" '
        f'fill="none" {style} marker-end="url(#arrow)"/>'
    )


def _node(s: GraphStory, x: int, y: int) -> str:
    fill = STATUS_FILL.get(s.status, "#e5e7eb")
    stroke = f'stroke="{CRITICAL}" stroke-width="3"' if s.critical else 'stroke="#6b7280" stroke-width="1"'
    box = f"box {_css(s.status)}{' critical' if s.critical else ''}"
    title = s.title if len(s.title) <= 24 else s.title[:23] + "…"
    return (
        f'<g class="node" data-story="{escape(s.id)}" data-status="{escape(s.status)}">'
        f"<title>{escape(s.id)}: {escape(s.title)} ({escape(s.status)})</title>"
        f'<rect class="{box}" x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="6" fill="{fill}" {stroke}/>'
        f'<text x="{x + 8}" y="{y + 19}" class="id">{escape(s.id)} · {escape(s.status)}</text>'
        f'<text x="{x + 8}" y="{y + 37}" class="title">{escape(title)}</text></g>'
    )


LABEL_W, BAR_W, BAR_H = 140, 720, 22


def svg_gantt(timeline: TimelineResult) -> str:
    bounds = _bounds(timeline)
    height = 50 + len(timeline.lanes) * (BAR_H + 8)
    width = LABEL_W + BAR_W + 40  # room for the last tick's label
    parts = [
        f'<svg class="gantt" role="img" aria-label="timeline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">'
    ]
    if bounds is not None:
        first, last = bounds
        scale = BAR_W / max(last - first, 1)
        parts += _axis(first, last, scale, height)
        for row, lane in enumerate(timeline.lanes):
            parts += _gantt_row(lane, 30 + row * (BAR_H + 8), first, last, scale)
    parts.append("</svg>")
    return "\n".join(parts)


def _axis(first: int, last: int, scale: float, height: int) -> list[str]:
    span = max(last - first, 1)
    step = next(
        (s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600) if span / (s * 1000) <= 10), 7200
    )
    out = []
    for k in range(0, span // (step * 1000) + 1):
        x = LABEL_W + k * step * 1000 * scale
        out.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height - 5}" class="tick"/>')
        out.append(f'<text x="{x:.1f}" y="14" class="axis">{_clock(k * step)}</text>')
    return out


def _clock(seconds: int) -> str:
    return (
        f"{seconds // 60}:{seconds % 60:02d}"
        if seconds < 3600
        else f"{seconds // 3600}h{seconds % 3600 // 60:02d}"
    )


def _gantt_row(lane: TimelineLane, y: int, first: int, last: int, scale: float) -> list[str]:
    out = [f'<text x="4" y="{y + 15}" class="lane">{escape(lane.lane)}</text>']
    for p in lane.phases:
        start = _ms(p.start)
        end = _ms(p.end) if p.end else last
        x = LABEL_W + (start - first) * scale
        fill = PHASE_FILL.get(p.phase, "#e5e7eb")
        tip = f"<title>{escape(lane.lane)}: {p.phase} {escape(p.start)} → {escape(p.end or 'now')}</title>"
        if p.phase in ("merged", "failed"):
            cy = y + BAR_H / 2
            out.append(
                f'<path class="phase {p.phase}" d="M{x:.1f},{y:.1f} l6,{BAR_H / 2:.1f} l-6,{BAR_H / 2:.1f} '
                f'l-6,-{BAR_H / 2:.1f} z" fill="{fill}" data-y="{cy:.1f}">{tip}</path>'
            )
            continue
        w = max((end - start) * scale, 1.0)
        out.append(
            f'<rect class="phase {p.phase}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_H}" '
            f'fill="{fill}">{tip}</rect>'
        )
    return out


STYLE = """
:root { color-scheme: light dark; --fg: #111827; --bg: #ffffff; --muted: #6b7280; --node-fg: #111827;
  --node-stroke: #6b7280; --critical: #b91c1c; }
@media (prefers-color-scheme: dark) { :root { --fg: #e5e7eb; --bg: #111827; --muted: #9ca3af;
  --node-fg: #f3f4f6; --node-stroke: #9ca3af; --critical: #f87171; } }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 2em; }
svg { color: var(--fg); max-width: 100%; height: auto; }
svg text { font: 12px system-ui, sans-serif; fill: var(--node-fg); }
svg text.lane, svg text.axis { fill: var(--fg); }
svg .tick { stroke: var(--muted); stroke-dasharray: 2 4; }
svg .box { stroke: var(--node-stroke); }
svg .box.critical, svg .edge.critical { stroke: var(--critical); }
.legend span { display: inline-block; padding: 0 .5em; margin-right: .3em; border-radius: 3px; color: var(--node-fg); }
.legend span[class^="ph_"] { color: var(--fg); border-left: 1em solid; border-radius: 0; padding: 0 .4em; }
"""


def _palette_css() -> str:
    """The fills as CSS: the light palette, then the dark one under `prefers-color-scheme`."""

    def rules(status: dict[str, str], phase: dict[str, str]) -> str:
        out = [
            f"svg .box.{_css(k)}, .legend .{_css(k)} {{ fill: {c}; background: {c}; }}"
            for k, c in status.items()
        ]
        out += [
            f"svg .phase.{k} {{ fill: {c}; }} .legend span.ph_{_css(k)} {{ border-left-color: {c}; }}"
            for k, c in phase.items()
        ]
        return "\n".join(out)

    dark = rules(STATUS_FILL_DARK, PHASE_FILL_DARK)
    return f"{rules(STATUS_FILL, PHASE_FILL)}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}"


def _legend(keys: list[str], prefix: str = "") -> str:
    spans = "".join(f'<span class="{prefix}{_css(k)}">{escape(k)}</span>' for k in keys)
    return f'<p class="legend">{spans}</p>'


def render_html(title: str, summary: list[str], graph: GraphResult, timeline: TimelineResult) -> str:
    """The self-contained page: the summary lines, the graph and the timeline."""
    items = "".join(f"<li>{escape(line)}</li>" for line in summary)
    return "\n".join([
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}{_palette_css()}</style></head><body>",
        f"<h1>{escape(title)}</h1><ul>{items}</ul>",
        "<h2>Graph</h2>",
        f"<p>Stories by status; the critical path is outlined in red.</p>{_legend(list(STATUS_FILL))}",
        svg_graph(graph),
        "<h2>Timeline</h2>",
        _legend(list(PHASE_FILL), "ph_"),
        svg_gantt(timeline),
        "</body></html>",
        "",
    ])  # fmt: skip
