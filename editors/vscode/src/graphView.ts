// "Flow: Show Epic Graph" (flowd.showGraph): a webview beside the editor drawing a run's graph
// and timeline (flow/graph, flow/timeline; docs/graph.md), asked again 150 ms after the run's
// notifications settle. A picked node reveals its lane in the Lanes view and offers its worktree,
// diff or findings. The page loads only the bundled dist/graphView.js (no remote asset).

import * as fs from "node:fs";
import * as vscode from "vscode";
import { formatUsd } from "./format";
import { themeCss, timelineLegend } from "./graphLayout";
import { findWorktree } from "./laneActions";
import { LanesModel, RunEntry } from "./lanesModel";
import { FlowServer, GraphResult, Requests, TimelineResult } from "./protocol";

export const SHOW_GRAPH = "flowd.showGraph";
export const GRAPH_VIEW_TYPE = "flowd.graph";
const SETTLE_MS = 150;

export interface GraphDeps {
  model: LanesModel;
  server(): FlowServer | undefined;
  extensionUri: vscode.Uri;
  /** The repository's main checkout (where `.flow/` is). */
  repo(): string | undefined;
  /** Reveal the lane in the Lanes view. */
  revealLane(runId: string, lane: string): Promise<void>;
  /** Run a lane command of the Lanes view (open worktree, show diff) on this lane. */
  laneCommand(command: string, runId: string, lane: string): Thenable<unknown>;
}

/** What a node's second line adds from flow/lane: the task in progress and the lane's cost. */
export function laneExtras(run: RunEntry | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const lane of run?.lanes.values() ?? []) {
    const parts = [lane.task ? `task ${lane.task.index}/${lane.task.count}` : "", lane.costUsd !== undefined ? `${lane.estimated ? "~" : ""}${formatUsd(lane.costUsd)}` : ""];
    out[lane.lane] = parts.filter(Boolean).join(" · ");
  }
  return out;
}

/** The run the graph shows by default: the newest running one, else the newest. */
export function defaultRun(model: LanesModel): string | undefined {
  return (model.activeRuns()[0] ?? model.runs()[0])?.runId;
}

export class GraphPanel implements vscode.Disposable {
  static current: GraphPanel | undefined;
  readonly panel: vscode.WebviewPanel;
  /** The last graph and timeline posted (the e2e test and unit tests read them). */
  last: { graph: GraphResult; timeline: TimelineResult } | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly stop: () => void;

  constructor(private readonly deps: GraphDeps, public runId: string) {
    const dist = vscode.Uri.joinPath(deps.extensionUri, "dist");
    this.panel = vscode.window.createWebviewPanel(GRAPH_VIEW_TYPE, "Epic Graph", { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false }, {
      enableScripts: true,
      localResourceRoots: [dist],
      retainContextWhenHidden: true,
    });
    this.panel.webview.html = pageHtml(this.panel.webview, vscode.Uri.joinPath(dist, "graphView.js"));
    this.panel.webview.onDidReceiveMessage((m: { type?: string; story?: string }) => {
      if (m.type === "ready") void this.refresh();
      if (m.type === "open" && m.story) void this.open(m.story);
    });
    this.stop = deps.model.onDidChange((change) => {
      if (!change.runId || change.runId === this.runId) this.schedule();
    });
    this.panel.onDidDispose(() => this.dispose());
  }

  show(runId: string): void {
    if (runId !== this.runId) {
      this.runId = runId;
      void this.refresh();
    }
    this.panel.reveal(vscode.ViewColumn.Beside);
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, SETTLE_MS);
  }

  async refresh(): Promise<void> {
    const server = this.deps.server();
    if (!server) return;
    try {
      const [graph, timeline] = await Promise.all([
        server.request<GraphResult>(Requests.graph, { runId: this.runId }),
        server.request<TimelineResult>(Requests.timeline, { runId: this.runId }),
      ]);
      this.last = { graph, timeline };
      const run = this.deps.model.run(this.runId);
      const title = `Epic ${run?.epicId ?? "?"} · run ${this.runId} · ${run?.status ?? ""}`;
      this.panel.title = `Epic Graph: ${run?.epicId ?? this.runId}`;
      await this.panel.webview.postMessage({ type: "update", title, graph, timeline, extras: laneExtras(run) });
    } catch {
      // The run may not be followed yet (a server restart): the next notification asks again.
    }
  }

  /** A node was picked: reveal its lane, then offer what there is to open. */
  private async open(story: string): Promise<void> {
    await this.deps.revealLane(this.runId, story);
    const repo = this.deps.repo();
    const run = this.deps.model.run(this.runId);
    const lane = run?.lanes.get(story);
    if (!repo || !run || !lane) return;
    const findings = lane.findings;
    const items = [
      findWorktree(lane) ? "Open Worktree" : "",
      "Show Diff",
      findings && fs.existsSync(findings) ? "Open Findings" : "",
    ].filter(Boolean);
    const choice = await vscode.window.showQuickPick(items, { title: `Story ${story} (${lane.status})` });
    if (choice === "Open Worktree") await this.deps.laneCommand("flowd.openWorktree", this.runId, story);
    if (choice === "Show Diff") await this.deps.laneCommand("flowd.showLaneDiff", this.runId, story);
    if (choice === "Open Findings" && findings) await vscode.window.showTextDocument(vscode.Uri.file(findings), { viewColumn: vscode.ViewColumn.One });
  }

  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.stop();
    if (GraphPanel.current === this) GraphPanel.current = undefined;
  }
}

function nonce(): string {
  let out = "";
  for (let i = 0; i < 32; i++) out += "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[Math.floor(Math.random() * 62)];
  return out;
}

/** The page: a strict CSP (only the bundled script and this nonce's style), two tabs. */
export function pageHtml(webview: vscode.Webview, script: vscode.Uri): string {
  const n = nonce();
  const csp = `default-src 'none'; img-src ${webview.cspSource}; style-src 'nonce-${n}'; script-src 'nonce-${n}' ${webview.cspSource};`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style nonce="${n}">${PAGE_CSS}\n${themeCss()}</style>
<title>Epic Graph</title></head>
<body>
<h1 id="title">Epic Graph</h1>
<div id="tablist" role="tablist" aria-label="views">
<button id="tab-graph" role="tab" aria-controls="panel-graph">Graph</button>
<button id="tab-timeline" role="tab" aria-controls="panel-timeline">Timeline</button>
</div>
<section id="panel-graph" role="tabpanel" aria-labelledby="tab-graph"><div id="graph"></div><p id="batches"></p>
<p class="hint">★ and a ring: the critical path. Tab to a story, arrows to move, Enter to open it.</p></section>
<section id="panel-timeline" role="tabpanel" aria-labelledby="tab-timeline" hidden><div id="timeline"></div>${timelineLegend()}</section>
<script nonce="${n}" src="${webview.asWebviewUri(script).toString()}"></script>
</body></html>`;
}

const PAGE_CSS = `
body { color: var(--vscode-editor-foreground); background: var(--vscode-editor-background); font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); }
h1 { font-size: 1.2em; font-weight: 600; }
[role=tablist] { display: flex; gap: .3em; margin-bottom: .8em; }
[role=tab] { color: var(--vscode-foreground); background: none; border: 1px solid transparent; border-bottom: 2px solid transparent; padding: .3em .8em; cursor: pointer; }
[role=tab][aria-selected=true] { border-bottom-color: var(--vscode-focusBorder); font-weight: 600; }
[role=tab]:focus-visible, g.node:focus-visible { outline: 2px solid var(--vscode-focusBorder); outline-offset: 2px; }
svg { max-width: 100%; height: auto; }
svg text { fill: var(--vscode-editor-foreground); font-size: 12px; font-family: var(--vscode-font-family); }
.box { fill-opacity: .18; stroke-width: 1.5; }
g.node { cursor: pointer; }
g.node:focus { outline: none; }
g.node:focus .box, g.node:hover .box { fill-opacity: .35; stroke-width: 2.5; }
.ring { fill: none; stroke: var(--vscode-editorWarning-foreground); stroke-width: 2; stroke-dasharray: 5 3; }
.legend { margin-top: .6em; }
svg.swatch { width: 12px; height: 12px; }
.legend .key { display: inline-flex; align-items: center; gap: .3em; margin-right: .8em; }
.edge { fill: none; stroke: var(--vscode-editor-foreground); stroke-opacity: .55; stroke-width: 1.5; }
.edge.critical { stroke: var(--vscode-editorWarning-foreground); stroke-opacity: 1; stroke-width: 3; }
.arrowhead { fill: var(--vscode-editor-foreground); }
.tick { stroke: var(--vscode-editorLineNumber-foreground); stroke-dasharray: 2 4; }
.hint, #batches { color: var(--vscode-descriptionForeground); }
body.vscode-high-contrast .box, body.vscode-high-contrast-light .box { stroke: var(--vscode-contrastBorder); stroke-width: 2; }
`;

/** "Flow: Show Epic Graph": the panel for `runId` (or the default run), created once. */
export function showGraph(deps: GraphDeps, arg?: unknown): GraphPanel | undefined {
  const given = typeof arg === "object" && arg !== null && typeof (arg as { runId?: unknown }).runId === "string" ? (arg as { runId: string }).runId : undefined;
  const runId = given ?? defaultRun(deps.model);
  if (!runId) {
    void vscode.window.showInformationMessage("flowd: no run to show yet. Launch an epic first (Flow: Launch Epic).");
    return undefined;
  }
  if (GraphPanel.current) {
    GraphPanel.current.show(runId);
  } else {
    GraphPanel.current = new GraphPanel(deps, runId);
  }
  return GraphPanel.current;
}
