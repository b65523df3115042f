// The epic graph and timeline as SVG markup (docs/graph.md): a small hand-written layout, shared
// by the webview (src/webview/graph.ts) and the tests. No vscode import, no DOM: strings in and out.
// Colours are VS Code theme variables, so light, dark and high-contrast themes all apply.

import type { GraphResult, GraphStory, TimelineLane, TimelineResult } from "./protocol";

export const NODE_W = 200;
export const NODE_H = 50;
export const COL_W = 250;
/** Characters of a node's second line that fit its width at the webview's 12px (about 6 px each). */
export const LINE_CHARS = 30;
export const ROW_H = 72;

/** Status → the theme colour a node is drawn in. */
export const STATUS_COLOR: Record<string, string> = {
  planned: "var(--vscode-disabledForeground)",
  active: "var(--vscode-charts-blue)",
  queued: "var(--vscode-charts-yellow)",
  merging: "var(--vscode-charts-orange)",
  ready: "var(--vscode-charts-purple)",
  waiting: "var(--vscode-charts-yellow)",
  done: "var(--vscode-charts-green)",
  failed: "var(--vscode-charts-red)",
  skipped: "var(--vscode-disabledForeground)",
};

export const PHASE_COLOR: Record<string, string> = {
  planned: "var(--vscode-disabledForeground)",
  coding: "var(--vscode-charts-blue)",
  gated: "var(--vscode-charts-purple)",
  queued: "var(--vscode-charts-yellow)",
  merging: "var(--vscode-charts-orange)",
  merged: "var(--vscode-charts-green)",
  paused: "var(--vscode-charts-yellow)",
  failed: "var(--vscode-charts-red)",
};

export function cssName(status: string): string {
  return status.replace(/[^A-Za-z0-9_-]/g, "_");
}

/**
 * The colour rules (classes, not style attributes: the webview's CSP allows no inline style).
 * Nodes are the status colour, faint inside; phases solid.
 */
export function themeCss(): string {
  const rules = Object.entries(STATUS_COLOR).map(([k, c]) => `.box.st-${cssName(k)} { stroke: ${c}; fill: ${c}; }`);
  rules.push(...Object.entries(PHASE_COLOR).map(([k, c]) => `.phase.${cssName(k)} { fill: ${c}; }`));
  return rules.join("\n");
}

export function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Stories by depth (the longest chain of dependencies before them), plan order within a layer. */
export function layers(stories: GraphStory[]): GraphStory[][] {
  const by = new Map(stories.map((s) => [s.id, s]));
  const depth = new Map<string, number>();
  const of = (id: string, seen: Set<string>): number => {
    const known = depth.get(id);
    if (known !== undefined) return known;
    seen.add(id);
    let d = 0;
    for (const dep of by.get(id)?.dependsOn ?? []) {
      if (by.has(dep) && !seen.has(dep)) d = Math.max(d, of(dep, seen) + 1);
    }
    seen.delete(id);
    depth.set(id, d);
    return d;
  };
  const out: GraphStory[][] = [];
  for (const s of stories) {
    const d = of(s.id, new Set());
    (out[d] ??= []).push(s);
  }
  return out.filter((layer) => layer !== undefined);
}

/** Where each story's node goes: its layer (column) and row. */
export function positions(graph: GraphResult): Map<string, { col: number; row: number; x: number; y: number }> {
  const out = new Map<string, { col: number; row: number; x: number; y: number }>();
  layers(graph.stories).forEach((layer, col) =>
    layer.forEach((s, row) => out.set(s.id, { col, row, x: 20 + col * COL_W, y: 20 + row * ROW_H })),
  );
  return out;
}

function edge(a: { x: number; y: number }, b: { x: number; y: number }, critical: boolean): string {
  const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
  const mid = (x1 + x2) / 2;
  return `<path class="edge${critical ? " critical" : ""}" d="M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}" marker-end="url(#arrow)"/>`;
}

/** A node's second line: the title, cut short so that the lane's task and cost still fit. */
export function secondLine(title: string, extra: string): string {
  const suffix = extra ? ` · ${extra}` : "";
  const room = Math.max(LINE_CHARS - suffix.length, 8);
  return (title.length > room ? `${title.slice(0, room - 1)}…` : title) + suffix;
}

function node(s: GraphStory, x: number, y: number, extra: string): string {
  const label = `${s.id}: ${s.title}, ${s.status}${s.critical ? ", on the critical path" : ""}`;
  return [
    `<g class="node${s.critical ? " critical" : ""}" data-story="${escapeXml(s.id)}" data-status="${escapeXml(s.status)}" tabindex="0" role="button" aria-label="${escapeXml(label)}">`,
    `<title>${escapeXml(label)}</title>`,
    `<rect class="box st-${cssName(s.status)}" x="${x}" y="${y}" width="${NODE_W}" height="${NODE_H}" rx="6"/>`,
    s.critical ? `<rect class="ring" x="${x - 4}" y="${y - 4}" width="${NODE_W + 8}" height="${NODE_H + 8}" rx="9"/>` : "",
    `<text x="${x + 8}" y="${y + 20}" class="id">${s.critical ? "★ " : ""}${escapeXml(s.id)} · ${escapeXml(s.status)}</text>`,
    `<text x="${x + 8}" y="${y + 38}" class="title">${escapeXml(secondLine(s.title, extra))}</text>`,
    "</g>",
  ].join("");
}

/**
 * The graph's SVG. `extra` gives a node's second-line suffix (the lane's task k/n and cost,
 * from flow/lane, which the webview knows and the graph does not).
 */
export function graphSvg(graph: GraphResult, extra: (story: string) => string = () => ""): string {
  const where = positions(graph);
  const cols = layers(graph.stories);
  const width = 40 + Math.max(cols.length - 1, 0) * COL_W + NODE_W;
  const height = 40 + Math.max(0, ...cols.map((c) => c.length)) * ROW_H;
  const critical = new Set(graph.stories.filter((s) => s.critical).map((s) => s.id));
  const parts = [
    `<svg class="graph" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="group" aria-label="epic graph">`,
    `<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>`,
  ];
  for (const s of graph.stories) {
    for (const dep of s.dependsOn) {
      const a = where.get(dep), b = where.get(s.id);
      if (a && b) parts.push(edge(a, b, critical.has(dep) && critical.has(s.id)));
    }
  }
  for (const s of graph.stories) {
    const p = where.get(s.id);
    if (p) parts.push(node(s, p.x, p.y, extra(s.id)));
  }
  parts.push("</svg>");
  return parts.join("\n");
}

export function ms(iso: string): number {
  return Date.parse(iso);
}

/** Whether the run is still going: it has not ended and a phase has not ended either. */
export function isLive(timeline: TimelineResult): boolean {
  return !timeline.endedAt && timeline.lanes.some((lane) => lane.phases.some((p) => !p.end));
}

/**
 * The first and last time on the timeline (a phase that lasts ends at the last). While the run
 * is live the last is `now` at the latest: a phase that just began (a story back to coding after
 * its red merge) is drawn as long as it has lasted, not as a sliver.
 */
export function bounds(timeline: TimelineResult, now?: number): [number, number] | undefined {
  const times: number[] = [];
  for (const lane of timeline.lanes) {
    for (const p of lane.phases) {
      times.push(ms(p.start));
      if (p.end) times.push(ms(p.end));
    }
  }
  for (const t of [timeline.startedAt, timeline.endedAt]) if (t) times.push(ms(t));
  if (times.length && now !== undefined && isLive(timeline)) times.push(now);
  return times.length ? [Math.min(...times), Math.max(...times)] : undefined;
}

const LABEL_W = 130;
const BAR_W = 640;
const BAR_H = 20;

function clock(seconds: number): string {
  return seconds < 3600 ? `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}` : `${Math.floor(seconds / 3600)}h${String(Math.floor((seconds % 3600) / 60)).padStart(2, "0")}`;
}

function timelineRow(lane: TimelineLane, y: number, first: number, last: number, scale: number): string[] {
  const out = [`<text x="4" y="${y + 14}" class="lane" data-lane="${escapeXml(lane.lane)}">${escapeXml(lane.lane)}</text>`];
  for (const p of lane.phases) {
    const start = ms(p.start);
    const end = p.end ? ms(p.end) : last;
    const x = LABEL_W + (start - first) * scale;
    const tip = `<title>${escapeXml(lane.lane)}: ${p.phase} ${clock(Math.round((start - first) / 1000))}–${p.end ? clock(Math.round((end - first) / 1000)) : "now"}</title>`;
    if (p.phase === "merged" || p.phase === "failed") {
      out.push(`<path class="phase ${cssName(p.phase)}" data-lane="${escapeXml(lane.lane)}" d="M${x.toFixed(1)},${y} l6,${BAR_H / 2} l-6,${BAR_H / 2} l-6,-${BAR_H / 2} z">${tip}</path>`);
      continue;
    }
    const w = Math.max((end - start) * scale, 1);
    out.push(`<rect class="phase ${cssName(p.phase)}" data-lane="${escapeXml(lane.lane)}" x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="${BAR_H}">${tip}</rect>`);
  }
  return out;
}

/** The timeline's key: each phase's colour swatch and name (the bars themselves carry no text). */
export function timelineLegend(): string {
  const items = Object.keys(PHASE_COLOR).map(
    (k) => `<span class="key"><svg class="swatch" width="12" height="12" viewBox="0 0 12 12" aria-hidden="true"><rect class="phase ${cssName(k)}" width="12" height="12" rx="2"/></svg>${escapeXml(k)}</span>`,
  );
  return `<p class="legend" aria-label="phases">${items.join(" ")}</p>`;
}

/**
 * The timeline's SVG: per lane a row of phase bars over the run's span, merged/failed as
 * diamonds; a live run's span reaches `now` (the webview's clock; the server is on this machine).
 */
export function timelineSvg(timeline: TimelineResult, now?: number): string {
  const height = 46 + timeline.lanes.length * (BAR_H + 8);
  const width = LABEL_W + BAR_W + 20;
  const parts = [`<svg class="timeline" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="timeline">`];
  const span = bounds(timeline, now);
  if (span) {
    const [first, last] = span;
    const total = Math.max(last - first, 1);
    const scale = BAR_W / total;
    const step = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].find((s) => total / (s * 1000) <= 8) ?? 7200;
    for (let k = 0; k * step * 1000 <= total; k++) {
      const x = LABEL_W + k * step * 1000 * scale;
      parts.push(`<line class="tick" x1="${x.toFixed(1)}" y1="20" x2="${x.toFixed(1)}" y2="${height - 4}"/>`);
      parts.push(`<text class="axis" x="${x.toFixed(1)}" y="14">${clock(k * step)}</text>`);
    }
    timeline.lanes.forEach((lane, row) => parts.push(...timelineRow(lane, 28 + row * (BAR_H + 8), first, last, scale)));
  }
  parts.push("</svg>");
  return parts.join("\n");
}

/** The node keyboard focus moves to from `from` on an arrow key (left/right: layers, up/down: rows). */
export function neighbour(graph: GraphResult, from: string, key: "ArrowLeft" | "ArrowRight" | "ArrowUp" | "ArrowDown"): string | undefined {
  const cols = layers(graph.stories);
  const where = positions(graph).get(from);
  if (!where) return graph.stories[0]?.id;
  if (key === "ArrowUp" || key === "ArrowDown") {
    const row = where.row + (key === "ArrowUp" ? -1 : 1);
    return cols[where.col][row]?.id ?? from;
  }
  const col = cols[where.col + (key === "ArrowLeft" ? -1 : 1)];
  if (!col) return from;
  return col[Math.min(where.row, col.length - 1)].id;
}
