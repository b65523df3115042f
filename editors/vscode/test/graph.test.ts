import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { bounds, graphSvg, layers, LINE_CHARS, neighbour, secondLine, themeCss, timelineLegend, timelineSvg } from "../src/graphLayout";
import type { GraphResult, TimelineResult } from "../src/protocol";

const GRAPH: GraphResult = {
  stories: [
    { id: "core", title: "Arithmetic core", status: "done", dependsOn: [], critical: true },
    { id: "parser", title: "Expression <parser>", status: "active", dependsOn: ["core"], critical: true },
    { id: "format", title: "Result formatter", status: "planned", dependsOn: ["core"], critical: false },
    { id: "cli", title: "Command line", status: "planned", dependsOn: ["parser", "format"], critical: true },
    { id: "docs", title: "User docs", status: "failed", dependsOn: [], critical: false },
  ],
  batches: [],
};

function nodes(svg: string): [string, string][] {
  return [...svg.matchAll(/<g class="node[^"]*" data-story="([^"]+)" data-status="([^"]+)"/g)].map((m) => [m[1], m[2]]);
}

describe("the epic graph's layout", () => {
  test("stories go in layers by their longest chain of dependencies, plan order within", () => {
    assert.deepEqual(layers(GRAPH.stories).map((l) => l.map((s) => s.id)), [["core", "docs"], ["parser", "format"], ["cli"]]);
  });

  test("every story is a focusable node with its status; the critical path is ringed and starred", () => {
    const svg = graphSvg(GRAPH, (s) => (s === "parser" ? "task 1/2" : ""));
    assert.deepEqual(nodes(svg), GRAPH.stories.map((s) => [s.id, s.status]));
    assert.equal((svg.match(/tabindex="0" role="button"/g) ?? []).length, 5);
    assert.equal((svg.match(/class="ring"/g) ?? []).length, 3);
    assert.equal((svg.match(/class="edge critical"/g) ?? []).length, 2); // core→parser→cli
    assert.equal((svg.match(/class="edge"/g) ?? []).length, 2);
    assert.match(svg, /Expression &lt;parser&gt; · task 1\/2/);
    assert.match(svg, /class="box st-failed"/);
    assert.doesNotMatch(svg, /style=/); // the webview's CSP allows no inline style
  });

  test("a node's second line fits its box: a long title is cut short, the lane's task and cost kept whole", () => {
    assert.equal(secondLine("Login API", "task 1/1 · <$0.01"), "Login API · task 1/1 · <$0.01");
    const cut = secondLine("A rather long story title indeed", "task 2/3 · $0.12");
    assert.equal(cut, "A rather l… · task 2/3 · $0.12");
    assert.equal(cut.length, LINE_CHARS);
    assert.equal(secondLine("A rather long story title indeed", ""), "A rather long story title ind…");
  });

  test("the timeline's key names every phase with its colour", () => {
    const key = timelineLegend();
    assert.deepEqual([...key.matchAll(/<rect class="phase (\w+)"/g)].map((m) => m[1]), ["planned", "coding", "gated", "queued", "merging", "merged", "paused", "failed"]);
    assert.doesNotMatch(key, /style=|data-lane/); // no inline style (CSP); not a lane's bar
  });

  test("the colours are theme variables, one rule per status and phase", () => {
    const css = themeCss();
    assert.match(css, /\.box\.st-done \{ stroke: var\(--vscode-charts-green\); fill: var\(--vscode-charts-green\); \}/);
    assert.match(css, /\.phase\.merging \{ fill: var\(--vscode-charts-orange\); \}/);
  });

  test("arrow keys move between layers and rows, staying put at an edge", () => {
    assert.equal(neighbour(GRAPH, "core", "ArrowRight"), "parser");
    assert.equal(neighbour(GRAPH, "docs", "ArrowRight"), "format");
    assert.equal(neighbour(GRAPH, "format", "ArrowRight"), "cli");
    assert.equal(neighbour(GRAPH, "cli", "ArrowLeft"), "parser");
    assert.equal(neighbour(GRAPH, "core", "ArrowDown"), "docs");
    assert.equal(neighbour(GRAPH, "core", "ArrowUp"), "core");
    assert.equal(neighbour(GRAPH, "cli", "ArrowRight"), "cli");
  });

  test("the timeline draws a bar per phase and a diamond where a lane merged", () => {
    const timeline: TimelineResult = {
      startedAt: "2026-12-01T10:00:00.000Z",
      lanes: [
        { lane: "core", title: "c", status: "done", phases: [
          { phase: "planned", start: "2026-12-01T10:00:00.000Z", end: "2026-12-01T10:00:02.000Z" },
          { phase: "coding", start: "2026-12-01T10:00:02.000Z", end: "2026-12-01T10:00:08.000Z" },
          { phase: "merged", start: "2026-12-01T10:00:08.000Z", end: "2026-12-01T10:00:08.000Z" },
        ] },
        { lane: "docs", title: "d", status: "active", phases: [{ phase: "coding", start: "2026-12-01T10:00:01.000Z" }] },
      ],
    };
    const svg = timelineSvg(timeline);
    assert.deepEqual([...svg.matchAll(/class="phase (\w+)" data-lane="(\w+)"/g)].map((m) => `${m[2]}:${m[1]}`), ["core:planned", "core:coding", "core:merged", "docs:coding"]);
    assert.match(svg, /<path class="phase merged"/);
    // docs' coding lasts: it runs to the timeline's end (10:00:08), 7 of its 8 seconds.
    const docs = /<rect class="phase coding" data-lane="docs" x="([\d.]+)" y="\d+" width="([\d.]+)"/.exec(svg);
    assert.ok(docs);
    assert.equal(Number(docs[2]).toFixed(0), ((640 * 7) / 8).toFixed(0));
  });

  test("a live run's timeline reaches now, so a phase that just began is drawn as long as it lasted", () => {
    const live: TimelineResult = {
      startedAt: "2026-12-01T10:00:00.000Z",
      lanes: [{ lane: "api", title: "a", status: "active", phases: [
        { phase: "merging", start: "2026-12-01T10:00:00.000Z", end: "2026-12-01T10:00:04.000Z" },
        { phase: "coding", start: "2026-12-01T10:00:04.000Z" },
      ] }],
    };
    const now = Date.parse("2026-12-01T10:00:08.000Z");
    assert.deepEqual(bounds(live), [Date.parse("2026-12-01T10:00:00.000Z"), Date.parse("2026-12-01T10:00:04.000Z")]);
    assert.deepEqual(bounds(live, now)?.[1], now);
    const coding = /<rect class="phase coding" data-lane="api" x="[\d.]+" y="\d+" width="([\d.]+)"/.exec(timelineSvg(live, now));
    assert.equal(coding?.[1], "320.0"); // 4 of the 8 seconds so far
    // An ended run keeps its own span, whatever the clock says.
    const ended = { ...live, endedAt: "2026-12-01T10:00:06.000Z" };
    assert.deepEqual(bounds(ended, now)?.[1], Date.parse("2026-12-01T10:00:06.000Z"));
  });
});
