import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { buildTree, TreeNode } from "../src/laneTree";
import { LanesModel } from "../src/lanesModel";
import { LanesTreeProvider } from "../src/lanesView";
import { END, MIDDLE, Note, RUN_ID, START } from "./fixtures/sequence";
import { ThemeColor, ThemeIcon, TreeItemCollapsibleState } from "./stubs/vscode";
import { TreeHost } from "./treeHost";

function feed(...batches: Note[][]): LanesModel {
  const model = new LanesModel();
  for (const batch of batches) for (const [method, params] of batch) model.apply(method, params);
  return model;
}

function child(node: TreeNode, label: string): TreeNode {
  const found = node.children.find((c) => c.label === label);
  assert.ok(found, `${node.label} has no child ${label}; it has ${node.children.map((c) => c.label).join(", ")}`);
  return found;
}

function summary(node: TreeNode): string {
  return `${node.icon.id}${node.icon.color ? `(${node.icon.color})` : ""} ${node.label} | ${node.description}`;
}

describe("LanesModel fed a run's notifications", () => {
  test("at the start: running run, two active lanes, tasks and clones", () => {
    const [run] = buildTree(feed(START));
    assert.equal(summary(run), "sync~spin(charts.blue) auth | 2 running · 0/3 done · $0.07 / $10");
    assert.equal(run.contextValue, "run.active");
    assert.equal(run.collapsed, "expanded");
    assert.deepEqual(
      run.children.map((c) => c.label),
      ["api — Login API", "ui — Login page", "docs — Document login", "Clones"],
    );

    const api = child(run, "api — Login API");
    assert.equal(summary(api), "sync~spin(charts.blue) api — Login API | active · claude#1 · task 1/3 · 4.2k tok · $0.05");
    assert.equal(api.contextValue, "lane");
    // The planner's and then the coder's lease of claude#1 are one clone: the lane shows its latest state.
    assert.deepEqual(api.children.map(summary), [
      "loading~spin(charts.blue) 1. Password hashing | started · claude#1 · satisfies 1",
      "circle-large-outline 2. POST /login handler | planned",
      "circle-large-outline 3. Rate limit failed logins | planned",
      "vm-active(charts.green) claude#1 | coder · leased",
    ]);

    const ui = child(run, "ui — Login page");
    assert.deepEqual(ui.children.map(summary), [
      "loading~spin(charts.blue) 1. Login form | started · ∥ parallel · codex#1",
      "loading~spin(charts.blue) 2. Error banner | started · ∥ parallel · codex#1",
      "vm-outline claude#2 | planner · released",
      "vm-active(charts.green) codex#1 | coder · leased",
    ]);
    assert.equal(ui.children[0].contextValue, "task.parallel");

    const docs = child(run, "docs — Document login");
    assert.equal(summary(docs), "circle-large-outline docs — Document login | planned");
    // Collapsible before its first task: VS Code would keep a childless row shut (docs/editors.md).
    assert.equal(docs.collapsed, "collapsed");

    const clones = child(run, "Clones");
    assert.equal(clones.description, "2 leased");
    assert.deepEqual(clones.children.map(summary), [
      "vm-active(charts.green) claude#1 | coder · leased · api",
      "vm-outline claude#2 | planner · released · ui",
      "vm-active(charts.green) codex#1 | coder · leased · ui",
    ]);
  });

  test("mid-run: tasks complete, a lane finishes, another waits, an executor is excluded", () => {
    const model = feed(START, MIDDLE);
    const [run] = buildTree(model);
    assert.equal(summary(run), "sync~spin(charts.blue) auth | 1 running · 1/3 done · $0.41 / $10");
    const api = child(run, "api — Login API");
    assert.equal(api.description, "active · claude#1 · task 2/3 · 18.4k tok · $0.26");
    assert.deepEqual(api.children.slice(0, 3).map((t) => `${t.icon.id} ${t.description}`), [
      "check completed",
      "loading~spin started · claude#1 · satisfies 2, 3",
      "circle-large-outline planned",
    ]);
    const ui = child(run, "ui — Login page");
    assert.equal(summary(ui), "pass-filled(charts.green) ui — Login page | done · 9.8k tok · $0.11");
    assert.equal(ui.collapsed, "collapsed");
    assert.deepEqual(ui.children.slice(2).map(summary), ["vm-outline claude#2 | reviewer · released", "vm-outline codex#1 | coder · released"]);
    const docs = child(run, "docs — Document login");
    assert.equal(summary(docs), "watch(charts.yellow) docs — Document login | waiting");
    assert.match(docs.tooltip, /waits for api/);
    const clones = child(run, "Clones");
    assert.equal(clones.description, "1 leased · 1 excluded");
    assert.equal(summary(clones.children[clones.children.length - 1]), "circle-slash(charts.red) gemini | excluded · usage limit reached");
  });

  test("the end: run done, every lane done, every lease released", () => {
    const model = feed(START, MIDDLE, END);
    const [run] = buildTree(model);
    assert.equal(summary(run), "pass(charts.green) auth | done · 3 stories · $1.42 / $10");
    assert.equal(run.contextValue, "run.done");
    assert.equal(run.collapsed, "collapsed");
    for (const lane of run.children.filter((c) => c.kind === "lane")) {
      assert.equal(lane.icon.id, "pass-filled", lane.label);
      for (const t of lane.children.filter((c) => c.kind === "task")) assert.equal(t.icon.id, "check", `${lane.label} ${t.label}`);
      for (const c of lane.children.filter((n) => n.kind === "clone")) assert.match(c.description, /released/, `${lane.label} ${c.label}`);
    }
    assert.equal(child(run, "Clones").description, "0 leased · 1 excluded");
    const entry = model.run(RUN_ID);
    assert.equal(entry?.cost?.costUsd, 1.42);
  });

  test("late updates never move a task backwards, and a re-plan replaces it", () => {
    const model = feed(START);
    model.apply("flow/task", { runId: RUN_ID, lane: "api", index: 1, count: 3, title: "Password hashing", state: "completed" });
    model.apply("flow/task", { runId: RUN_ID, lane: "api", index: 1, count: 3, title: "Password hashing", state: "started" });
    assert.equal(model.run(RUN_ID)?.lanes.get("api")?.tasks.get(1)?.state, "completed");
    model.apply("flow/task", { runId: RUN_ID, lane: "api", index: 1, count: 2, title: "Hash with argon2", state: "planned" });
    const tasks = model.run(RUN_ID)?.lanes.get("api")?.tasks;
    assert.equal(tasks?.get(1)?.state, "planned");
    assert.equal(tasks?.get(1)?.title, "Hash with argon2");
    assert.equal(tasks?.get(3)?.count, 2);
  });

  test("a lane sent back for a merge revision, with flaky gates, says so; the counts go when absent", () => {
    const model = feed(START);
    const lane = { runId: RUN_ID, lane: "api", title: "Login API", status: "active", tokens: 100, estimated: false };
    model.apply("flow/lane", { ...lane, mergeRevision: 1, flaky: 2 });
    const api = child(buildTree(model)[0], "api — Login API");
    assert.equal(api.description, "active · 100 tok · merge revision 1 · flaky gates: 2");
    assert.match(api.tooltip, /Merge revision 1: the epic gates were red on its merge/);
    assert.match(api.tooltip, /Flaky gates: 2 \(green only on a rerun; not charged to the story\)/);
    model.apply("flow/lane", lane);
    assert.equal(child(buildTree(model)[0], "api — Login API").description, "active · 100 tok");
  });

  test("a flow/status snapshot attaches to a run already going, and ends its leases when it ended", () => {
    const model = new LanesModel();
    model.applyStatus({
      runs: [
        {
          runId: "r1",
          epicId: "auth",
          status: "running",
          startedAt: "2026-11-29T14:03:07.412Z",
          lanes: [
            { runId: "r1", lane: "api", title: "Login API", status: "active", executor: "claude", clone: 2, task: { index: 2, count: 4, title: "Handler" }, tokens: 1200, costUsd: 0.5, estimated: true },
            { runId: "r1", lane: "ui", title: "Login page", status: "done", tokens: 300, estimated: false },
          ],
          totals: { tokens: 1500, estimatedTokens: 1200, unpricedTokens: 300, requests: 4 },
          clones: [{ executor: "claude", clone: 2, role: "coder", label: "api" }],
        },
      ],
    });
    const [run] = buildTree(model);
    assert.equal(summary(run), "sync~spin(charts.blue) auth | 1 running · 1/2 done · 1.5k tok unpriced");
    const api = child(run, "api — Login API");
    assert.equal(api.description, "active · claude#2 · task 2/4 · 1.2k tok · ~$0.50");
    assert.deepEqual(api.children.map(summary), ["loading~spin(charts.blue) 2. Handler | started", "vm-active(charts.green) claude#2 | coder · leased"]);

    model.applyStatus({ runs: [{ runId: "r1", epicId: "auth", status: "cancelled", lanes: [], clones: [] }] });
    const [ended] = buildTree(model);
    assert.equal(ended.icon.id, "circle-slash");
    assert.equal(ended.contextValue, "run.ended");
    assert.match(child(ended, "api — Login API").children[1].description, /released/);
  });

  test("notifications for unknown methods are ignored and listeners hear every change", () => {
    const model = new LanesModel();
    let changes = 0;
    const off = model.onDidChange(() => changes++);
    model.apply("flow/unknown", {});
    for (const [method, params] of START) model.apply(method, params);
    off();
    model.apply("flow/run", { runId: RUN_ID, epicId: "auth", status: "done", done: 3, failed: 0, skipped: 0, total: 3 });
    assert.equal(changes, START.length);
  });

  test("active runs sort first, then the most recent", () => {
    const model = new LanesModel();
    model.apply("flow/run", { runId: "old", epicId: "a", status: "done", done: 1, failed: 0, skipped: 0, total: 1 });
    model.apply("flow/run", { runId: "live", epicId: "b", status: "running", done: 0, failed: 0, skipped: 0, total: 2 });
    model.apply("flow/run", { runId: "newer", epicId: "c", status: "failed", done: 0, failed: 1, skipped: 0, total: 1 });
    assert.deepEqual(model.runs().map((r) => r.runId), ["live", "newer", "old"]);
  });
});

describe("LanesTreeProvider", () => {
  test("maps nodes to TreeItems with codicons, colours, ids and context values", () => {
    const model = feed(START, MIDDLE);
    const provider = new LanesTreeProvider(model, 0);
    const [run] = provider.getChildren();
    const runItem = provider.getTreeItem(run);
    assert.equal(runItem.label, "auth");
    assert.equal(runItem.id, "epic:auth");
    assert.equal(runItem.collapsibleState, TreeItemCollapsibleState.Expanded);
    assert.equal(runItem.contextValue, "run.active");
    const lanes = provider.getChildren(run);
    const apiItem = provider.getTreeItem(lanes[0]);
    assert.equal(apiItem.label, "api — Login API");
    assert.equal(apiItem.description, "active · claude#1 · task 2/3 · 18.4k tok · $0.26");
    assert.ok(apiItem.iconPath instanceof ThemeIcon);
    assert.equal(apiItem.iconPath.id, "sync~spin");
    assert.ok(apiItem.iconPath.color instanceof ThemeColor);
    assert.equal(apiItem.iconPath.color.id, "charts.blue");
    const taskItem = provider.getTreeItem(provider.getChildren(lanes[0])[0]);
    assert.equal(taskItem.label, "1. Password hashing");
    assert.equal(taskItem.collapsibleState, TreeItemCollapsibleState.None);
    assert.equal((taskItem.iconPath as ThemeIcon).id, "check");
    provider.dispose();
  });

  test("repaints when the model changes", () => {
    const model = new LanesModel();
    const provider = new LanesTreeProvider(model, 0);
    let fired = 0;
    provider.onDidChangeTreeData(() => fired++);
    assert.deepEqual(provider.getChildren(), []);
    for (const [method, params] of START.slice(0, 2)) model.apply(method, params);
    // The new run repaints the roots; its first lane needs no repaint of its own, since VS Code
    // has not asked for the run's children yet (it gets them fresh when it does).
    assert.equal(fired, 1);
    assert.equal(provider.getChildren().length, 1);
    provider.dispose();
  });
});

describe("LanesTreeProvider in a tree that keeps a row's first expansion, as VS Code's does", () => {
  const lane = (id: string, title: string, status: string): Note => ["flow/lane", { runId: RUN_ID, lane: id, title, status, tokens: 0, estimated: false }];
  const task = (l: string, index: number, state: string): Note => ["flow/task", { runId: RUN_ID, lane: l, index, count: 2, title: `Step ${index}`, state }];
  const run: Note = ["flow/run", { runId: RUN_ID, epicId: "auth", status: "running", done: 0, failed: 0, skipped: 0, total: 2 }];

  function shown(): { provider: LanesTreeProvider; host: TreeHost<TreeNode>; apply: (...notes: Note[]) => void } {
    const model = new LanesModel();
    const provider = new LanesTreeProvider(model, 0);
    const host = new TreeHost(provider);
    const apply = (...notes: Note[]): void => {
      for (const [method, params] of notes) model.apply(method, params);
    };
    return { provider, host, apply };
  }

  test("an epic drawn before its first lane, and a lane before its first task, open when they run", () => {
    const { provider, host, apply } = shown();
    apply(run);
    assert.deepEqual(host.rows(), ["▾ auth"]);
    apply(lane("api", "Login API", "planned"), lane("ui", "Login page", "planned"));
    assert.deepEqual(host.rows(), ["▾ auth", "  ▸ api — Login API", "  ▸ ui — Login page"]);
    apply(task("api", 1, "planned"), task("api", 2, "planned"), lane("api", "Login API", "active"), task("api", 1, "started"));
    assert.deepEqual(host.rows(), ["▾ auth", "  ▾ api — Login API", "    · 1. Step 1", "    · 2. Step 2", "  ▸ ui — Login page"]);
    // Waiting again (a cancel) and done, it stays open: the same row.
    apply(lane("api", "Login API", "waiting"), lane("api", "Login API", "done"));
    assert.deepEqual(host.rows().slice(1, 4), ["  ▾ api — Login API", "    · 1. Step 1", "    · 2. Step 2"]);
    // A lane that first shows running, before any task, is drawn open.
    apply(lane("docs", "Document login", "active"), task("docs", 1, "started"));
    assert.deepEqual(host.rows().slice(-2), ["  ▾ docs — Document login", "    · 1. Step 1"]);
    provider.dispose();
  });

  test("a running row the user collapsed stays collapsed, and so do the rows under it", () => {
    const { provider, host, apply } = shown();
    apply(run, lane("api", "Login API", "active"), task("api", 1, "started"), lane("ui", "Login page", "planned"), task("ui", 1, "planned"));
    host.collapse(`lane:${RUN_ID}:api`);
    apply(task("api", 1, "completed"), task("api", 2, "started"), lane("api", "Login API", "merging"), lane("api", "Login API", "active"));
    assert.deepEqual(host.rows(), ["▾ auth", "  ▸ api — Login API", "  ▸ ui — Login page"]);
    host.collapse("epic:auth");
    apply(lane("ui", "Login page", "active"), lane("docs", "Document login", "planned"), task("docs", 1, "planned"), lane("docs", "Document login", "active"));
    assert.deepEqual(host.rows(), ["▸ auth"]);
    // Opened again by the user, the epic shows its lanes as they are: the running ones open.
    host.expand("epic:auth");
    assert.deepEqual(host.rows(), ["▾ auth", "  ▾ api — Login API", "    · 1. Step 1", "    · 2. Step 2", "  ▾ ui — Login page", "    · 1. Step 1", "  ▾ docs — Document login", "    · 1. Step 1"]);
    provider.dispose();
  });
});
