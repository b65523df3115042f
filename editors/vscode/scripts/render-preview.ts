// `npm run render-preview`: renders the Lanes view and the status bar, as the extension builds
// them from LanesModel, to media/preview.html — fed with the realistic notification sequence
// the tests use — and, when Chromium is installed, screenshots it to out/preview/model-preview.png.

import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { buildTree, TreeNode } from "../src/laneTree";
import { LanesModel } from "../src/lanesModel";
import { statusText } from "../src/statusText";
import { END, MIDDLE, Note, START } from "../test/fixtures/sequence";

const root = path.resolve(__dirname, "..", "..");
const media = path.join(root, "media");

const COLORS: Record<string, string> = {
  "charts.blue": "#3794ff",
  "charts.green": "#89d185",
  "charts.red": "#f14c4c",
  "charts.yellow": "#cca700",
  disabledForeground: "#cccccc80",
};

function feed(...batches: Note[][]): LanesModel {
  const model = new LanesModel();
  for (const batch of batches) for (const [method, params] of batch) model.apply(method, params);
  return model;
}

function esc(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function icon(id: string, color?: string): string {
  const [name, modifier] = id.split("~");
  const style = color ? ` style="color:${COLORS[color] ?? color}"` : "";
  return `<i class="codicon codicon-${name}${modifier ? ` codicon-modifier-${modifier}` : ""}"${style}></i>`;
}

/** `$(sync~spin) 3/5 lanes` → the icon and the text, as VS Code renders status bar labels. */
function statusHtml(text: string): string {
  return esc(text).replace(/\$\(([\w~-]+)\)/g, (_m, id: string) => icon(id));
}

function rows(nodes: TreeNode[], depth: number, expand: Set<string>): string {
  return nodes
    .map((node) => {
      const open = node.collapsed === "expanded" || (node.collapsed === "collapsed" && expand.has(node.kind));
      const twisty = node.collapsed === "none" ? "" : icon(open ? "chevron-down" : "chevron-right");
      const row = `<div class="row" style="padding-left:${8 + depth * 16}px" title="${esc(node.tooltip)}">
  <span class="twisty">${twisty}</span>${icon(node.icon.id, node.icon.color)}<span class="label">${esc(node.label)}</span><span class="desc">${esc(node.description)}</span>
</div>`;
      return open ? row + rows(node.children, depth + 1, expand) : row;
    })
    .join("\n");
}

function page(): string {
  const live = feed(START, MIDDLE);
  const finished = feed(START, MIDDLE, END);
  const tree = rows(buildTree(live), 0, new Set(["roster"]));
  const examples: [string, LanesModel][] = [
    ["running, measured cost within a budget", live],
    ["running, estimated usage", estimated()],
    ["running, a model without a price", unpriced()],
    ["the run is done", finished],
  ];
  const strip = examples
    .map(([caption, model]) => `<div class="example"><div class="statusbar"><span class="item">${statusHtml(statusText(model))}</span></div><div class="caption">${esc(caption)}</div></div>`)
    .join("\n");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>flowd for VS Code: Lanes view and status bar</title>
<link rel="stylesheet" href="../node_modules/@vscode/codicons/dist/codicon.css">
<style>
  body { margin: 0; background: #1e1e1e; color: #cccccc; font: 13px -apple-system, "Segoe UI", "Ubuntu", "Droid Sans", sans-serif; }
  .window { display: flex; width: 860px; height: 380px; border-bottom: 1px solid #111; }
  .activity { width: 48px; background: #333333; display: flex; flex-direction: column; align-items: center; padding-top: 8px; }
  .activity img { width: 24px; height: 24px; filter: invert(1); opacity: 1; border-left: 2px solid #fff; padding: 12px 10px 12px 12px; }
  .sidebar { width: 600px; background: #252526; overflow: hidden; }
  .title { padding: 10px 20px; font-size: 11px; letter-spacing: .04em; text-transform: uppercase; }
  .section { padding: 3px 8px; font-size: 11px; font-weight: 700; text-transform: uppercase; display: flex; align-items: center; gap: 4px; }
  .row { display: flex; align-items: center; height: 22px; white-space: nowrap; }
  .row .codicon { font-size: 16px; margin-right: 6px; }
  .twisty { width: 16px; display: inline-flex; }
  .twisty .codicon { margin-right: 0; }
  .label { color: #cccccc; margin-right: 8px; }
  .desc { color: #cccccc99; font-size: 12.5px; }
  .editor { flex: 1; background: #1e1e1e; }
  .statusbar { background: #007acc; color: #fff; height: 22px; display: flex; align-items: center; font-size: 12px; padding: 0 8px; }
  .statusbar .item { display: inline-flex; align-items: center; gap: 4px; padding: 0 5px; }
  .statusbar .codicon { font-size: 14px; }
  .examples { display: grid; grid-template-columns: 1fr 1fr; gap: 12px 24px; padding: 16px; width: 828px; }
  .caption { color: #999; font-size: 12px; margin-top: 4px; }
</style>
</head>
<body>
<div class="window">
  <div class="activity"><img src="flowd.svg" alt="flowd"></div>
  <div class="sidebar">
    <div class="title">flowd</div>
    <div class="section">${icon("chevron-down")} Lanes</div>
${tree}
  </div>
  <div class="editor"></div>
</div>
<div class="statusbar"><span class="item">${statusHtml(statusText(live))}</span></div>
<div class="examples">
${strip}
</div>
</body>
</html>
`;
}

function estimated(): LanesModel {
  const model = feed(START);
  const runId = START[0][1].runId as string;
  model.apply("flow/cost", { runId, tokens: 30_000, costUsd: 0.4, estimatedTokens: 30_000, unpricedTokens: 0 });
  return model;
}

function unpriced(): LanesModel {
  const model = feed(START);
  const runId = START[0][1].runId as string;
  model.apply("flow/cost", { runId, tokens: 52_000, costUsd: 1.1, estimatedTokens: 0, unpricedTokens: 12_300, budgetUsd: 10 });
  return model;
}

function findChromium(): string | undefined {
  const candidates = [process.env.CHROMIUM, "chromium", "chromium-browser", "google-chrome"].filter((c): c is string => Boolean(c));
  for (const c of candidates) {
    try {
      execFileSync(c, ["--version"], { stdio: "ignore" });
      return c;
    } catch {
      // not this one
    }
  }
  return undefined;
}

const html = path.join(media, "preview.html");
fs.writeFileSync(html, page());
console.log(`render-preview: wrote ${path.relative(root, html)}`);
const chromium = findChromium();
if (!chromium) {
  console.log("render-preview: no Chromium (set CHROMIUM or apt-get install chromium); no PNG rendered");
} else {
  // media/preview.png is a screenshot of the real editor (make test-e2e); this one is the model's.
  const png = path.join(root, "out", "preview", "model-preview.png");
  fs.mkdirSync(path.dirname(png), { recursive: true });
  execFileSync(
    chromium,
    ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=860,560", `--screenshot=${png}`, `file://${html}`],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  console.log(`render-preview: wrote ${path.relative(root, png)} with ${chromium}`);
}
