import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { costPhrase, formatTokens, formatUsd } from "../src/format";
import { LanesModel } from "../src/lanesModel";
import { IDLE_TEXT, statusText, statusTooltip } from "../src/statusText";
import { FlowStatusBar, STARTING_TEXT } from "../src/statusBar";
import { END, MIDDLE, RUN_ID, START } from "./fixtures/sequence";

function running(runId: string, epicId: string, lanes: [string, string][], total = lanes.length): LanesModel {
  const model = new LanesModel();
  model.apply("flow/run", { runId, epicId, status: "running", done: 0, failed: 0, skipped: 0, total });
  for (const [lane, status] of lanes) model.apply("flow/lane", { runId, lane, title: lane, status, tokens: 0, estimated: false });
  return model;
}

function cost(model: LanesModel, runId: string, params: Record<string, unknown>): LanesModel {
  model.apply("flow/cost", { runId, tokens: 0, estimatedTokens: 0, unpricedTokens: 0, ...params });
  return model;
}

const FIVE: [string, string][] = [
  ["a", "active"],
  ["b", "active"],
  ["c", "active"],
  ["d", "planned"],
  ["e", "done"],
];

describe("statusText", () => {
  test("idle before any run", () => {
    assert.equal(statusText(new LanesModel()), IDLE_TEXT);
  });

  test("running: lanes running out of the epic's stories, and the measured cost", () => {
    const model = cost(running("r", "auth", FIVE), "r", { tokens: 90_000, costUsd: 1.42 });
    assert.equal(statusText(model), "$(sync~spin) 3/5 lanes · $1.42");
  });

  test("running with nothing spent yet shows no cost", () => {
    assert.equal(statusText(running("r", "auth", FIVE)), "$(sync~spin) 3/5 lanes");
  });

  test("estimated figures are marked", () => {
    const model = cost(running("r", "auth", FIVE), "r", { tokens: 30_000, costUsd: 0.4, estimatedTokens: 30_000 });
    assert.equal(statusText(model), "$(sync~spin) 3/5 lanes · ~$0.40 est.");
  });

  test("unpriced tokens are said apart, never counted as $0", () => {
    const some = cost(running("r", "auth", FIVE), "r", { tokens: 50_000, costUsd: 1.1, unpricedTokens: 12_345 });
    assert.equal(statusText(some), "$(sync~spin) 3/5 lanes · $1.10 + 12.3k tok unpriced");
    const all = cost(running("r", "auth", FIVE), "r", { tokens: 8000, unpricedTokens: 8000 });
    assert.equal(statusText(all), "$(sync~spin) 3/5 lanes · 8k tok unpriced");
  });

  test("the budget when one is set", () => {
    const model = cost(running("r", "auth", FIVE), "r", { tokens: 90_000, costUsd: 1.42, budgetUsd: 10 });
    assert.equal(statusText(model), "$(sync~spin) 3/5 lanes · $1.42 / $10");
    const est = cost(running("r", "auth", FIVE), "r", { tokens: 9000, costUsd: 0.4, estimatedTokens: 9000, budgetUsd: 2.5 });
    assert.equal(statusText(est), "$(sync~spin) 3/5 lanes · ~$0.40 est. / $2.50");
  });

  test("done, failed, cancelled and halted runs", () => {
    const model = new LanesModel();
    for (const batch of [START, MIDDLE, END]) for (const [m, p] of batch) model.apply(m, p);
    assert.equal(statusText(model), "$(check) auth done · $1.42 / $10");
    model.apply("flow/run", { runId: RUN_ID, epicId: "auth", status: "failed", done: 2, failed: 1, skipped: 0, total: 3 });
    assert.equal(statusText(model), "$(error) auth failed · 2/3 done · $1.42 / $10");
    model.apply("flow/run", { runId: RUN_ID, epicId: "auth", status: "cancelled", done: 2, failed: 0, skipped: 0, total: 3 });
    assert.equal(statusText(model), "$(circle-slash) auth cancelled · 2/3 done · $1.42 / $10");
    model.apply("flow/run", { runId: RUN_ID, epicId: "auth", status: "halted", done: 2, failed: 0, skipped: 0, total: 3 });
    assert.equal(statusText(model), "$(warning) auth halted · 2/3 done · $1.42 / $10");
  });

  test("several active runs are summed; an ended one does not count", () => {
    const model = cost(running("r1", "auth", FIVE), "r1", { tokens: 1000, costUsd: 1 });
    model.apply("flow/run", { runId: "r2", epicId: "billing", status: "running", done: 0, failed: 0, skipped: 0, total: 4 });
    model.apply("flow/lane", { runId: "r2", lane: "x", title: "x", status: "active", tokens: 0, estimated: false });
    cost(model, "r2", { tokens: 1000, costUsd: 0.5, estimatedTokens: 1000, budgetUsd: 3 });
    model.apply("flow/run", { runId: "r0", epicId: "old", status: "done", done: 1, failed: 0, skipped: 0, total: 1 });
    assert.equal(statusText(model), "$(sync~spin) 2 runs · 4/9 lanes · ~$1.50 est.");
  });

  test("the tooltip lists runs", () => {
    const model = cost(running("r", "auth", FIVE), "r", { tokens: 90_000, costUsd: 1.42 });
    assert.equal(statusTooltip(model), "auth (r) · 3 running, 0/5 done · 90k tokens · $1.42\nClick to open the lanes view.");
  });
});

describe("formatting", () => {
  test("dollars and tokens", () => {
    assert.equal(formatUsd(0), "$0.00");
    assert.equal(formatUsd(0.004), "<$0.01");
    assert.equal(formatUsd(12.345), "$12.35");
    assert.equal(formatUsd(10, { whole: true }), "$10");
    assert.equal(formatUsd(2345.6), "$2,346");
    assert.equal(formatTokens(999), "999");
    assert.equal(formatTokens(1000), "1k");
    assert.equal(formatTokens(123_456), "123k");
    assert.equal(formatTokens(4_100_000), "4.1M");
  });

  test("a budget alone, before any spend", () => {
    assert.equal(costPhrase({ tokens: 0, estimatedTokens: 0, unpricedTokens: 0, budgetUsd: 5 }), "$0.00 / $5");
    assert.equal(costPhrase(undefined), "");
  });
});

describe("FlowStatusBar", () => {
  test("follows the model, and says when flowd is missing", () => {
    const model = running("r", "auth", FIVE);
    const bar = new FlowStatusBar(model);
    assert.equal(bar.text, "$(sync~spin) 3/5 lanes");
    cost(model, "r", { tokens: 1, costUsd: 0.2 });
    bar.setServerState("running", "");
    assert.equal(bar.text, "$(sync~spin) 3/5 lanes · $0.20");
    bar.setServerState("missing", "flowd was not found");
    assert.equal(bar.text, "$(warning) flowd not found");
    bar.dispose();
  });

  test("says the server is starting until it runs, when no run is known yet", () => {
    const bar = new FlowStatusBar(new LanesModel());
    assert.equal(bar.text, STARTING_TEXT);
    bar.setServerState("running", "");
    assert.equal(bar.text, IDLE_TEXT);
    bar.dispose();
  });
});
