/// <reference lib="dom" />
// The Epic Graph webview's script (bundled into dist/graphView.js, loaded under a strict CSP with
// no remote asset): draws what the extension posts, two tabs (Graph, Timeline), keyboard
// navigation between nodes, and tells the extension which story was picked.

import { graphSvg, isLive, neighbour, timelineSvg } from "../graphLayout";
import type { GraphResult, TimelineResult } from "../protocol";

interface Update {
  type: "update";
  title: string;
  graph: GraphResult;
  timeline: TimelineResult;
  extras: Record<string, string>;
}

declare function acquireVsCodeApi(): { postMessage(message: unknown): void };

const vscode = acquireVsCodeApi();
let graph: GraphResult = { stories: [], batches: [] };
let timeline: TimelineResult = { lanes: [] };
// While the run is live the timeline is drawn again every second, so that a lasting phase grows
// between the server's notifications (a coder's long turn sends none).
const TICK_MS = 1000;
let ticker: ReturnType<typeof setInterval> | undefined;

function drawTimeline(): void {
  byId("timeline").innerHTML = timelineSvg(timeline, Date.now());
  if (!isLive(timeline) && ticker !== undefined) {
    clearInterval(ticker);
    ticker = undefined;
  } else if (isLive(timeline) && ticker === undefined) {
    ticker = setInterval(drawTimeline, TICK_MS);
  }
}

function byId<T extends HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}

function focusStory(story: string | undefined): void {
  if (!story) return;
  const el = document.querySelector<SVGGElement>(`g.node[data-story="${CSS.escape(story)}"]`);
  el?.focus();
}

function render(u: Update): void {
  const focused = document.activeElement?.getAttribute("data-story") ?? undefined;
  graph = u.graph;
  byId("title").textContent = u.title;
  byId("graph").innerHTML = graphSvg(u.graph, (story) => u.extras[story] ?? "");
  timeline = u.timeline;
  drawTimeline();
  const batches = u.graph.batches.map((b) => `batch ${b.batch}: ${b.lanes.join(", ")} ${b.ok === true ? "✓ green" : b.ok === false ? "✗ red" : "… gating"}`);
  byId("batches").textContent = batches.join("  ·  ");
  // What flow/graph answered, as the page got it: the e2e test checks the drawing against it.
  document.body.dataset.graph = JSON.stringify(Object.fromEntries(u.graph.stories.map((s) => [s.id, s.status])));
  // Only while the page has the focus: a live update must not take it from the editor or palette.
  if (document.hasFocus()) focusStory(focused);
}

function showTab(name: "graph" | "timeline"): void {
  for (const tab of ["graph", "timeline"] as const) {
    const button = byId<HTMLButtonElement>(`tab-${tab}`);
    button.setAttribute("aria-selected", String(tab === name));
    button.tabIndex = tab === name ? 0 : -1;
    byId(`panel-${tab}`).hidden = tab !== name;
  }
}

window.addEventListener("message", (event: MessageEvent) => {
  const data = event.data as Update;
  if (data?.type === "update") render(data);
});

document.addEventListener("click", (event) => {
  const target = (event.target as Element).closest?.("g.node");
  const story = target?.getAttribute("data-story");
  if (story) vscode.postMessage({ type: "open", story });
});

document.addEventListener("keydown", (event) => {
  const story = document.activeElement?.getAttribute("data-story");
  if (!story) return;
  if (event.key === "Enter" || event.key === " ") {
    event.preventDefault();
    vscode.postMessage({ type: "open", story });
  } else if (["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown"].includes(event.key)) {
    event.preventDefault();
    focusStory(neighbour(graph, story, event.key as "ArrowLeft"));
  }
});

byId("tab-graph").addEventListener("click", () => showTab("graph"));
byId("tab-timeline").addEventListener("click", () => showTab("timeline"));
byId("tablist").addEventListener("keydown", (event) => {
  if (event.key === "ArrowLeft" || event.key === "ArrowRight") {
    const next = byId("tab-graph").getAttribute("aria-selected") === "true" ? "timeline" : "graph";
    showTab(next);
    byId(`tab-${next}`).focus();
  }
});
showTab("graph");
vscode.postMessage({ type: "ready" });
