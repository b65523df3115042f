// The editor defects a new user met (issue "The editors, live and true"): resumed runs as one
// epic, the epic's cost, a notice when a run ends, merged lanes' diffs, the tree repainting only
// what changed, clean exits, `<model>` in the cost preview, worktree folders and the TCP token.
// Real git repositories and real files in temp dirs; the `vscode` module is the test stub.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import { attentionBadge, AttentionTracker, attentionText } from "../src/attention";
import { clientLogChannel, clientLogLine } from "../src/clientLog";
import { CommandContext, notifyRunEnded, OPEN_REPORT, resumeRun, resumeTarget, runEndedMessage, showAttention, showCostReport, showLaneDiff } from "../src/commands";
import { diffCommand, mergeCommit } from "../src/laneActions";
import { buildTree, TreeNode } from "../src/laneTree";
import { epicCost, LaneEntry, LanesModel, RunEntry } from "../src/lanesModel";
import { LanesTreeProvider } from "../src/lanesView";
import { escapeAngleBrackets } from "../src/markdown";
import { FlowServer, StatusResult } from "../src/protocol";
import { mainCheckout } from "../src/repoRoot";
import { statusText } from "../src/statusText";
import { readToken, tokenFile } from "../src/tcp";
import * as stub from "./stubs/vscode";

let tmp: string;

before(() => {
  tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-fixes-")));
});

after(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@flowd.invalid", ...args], { cwd, encoding: "utf8" }).trim();
}

function runNote(runId: string, epicId: string, status: string, done = 0, total = 1): [string, unknown] {
  return ["flow/run", { runId, epicId, status, done, failed: 0, skipped: 0, total }];
}

function costNote(runId: string, tokens: number, costUsd: number): [string, unknown] {
  return ["flow/cost", { runId, tokens, costUsd, estimatedTokens: 0, unpricedTokens: 0 }];
}

/** The `slow` epic: run r1 cancelled, then resumed as r2 (which is running or done). */
function resumedEpic(second: "running" | "done" | "failed"): LanesModel {
  const model = new LanesModel();
  model.applyStatus({
    runs: [
      { runId: "r1", epicId: "slow", status: "cancelled", startedAt: "2026-11-29T10:00:00.000Z", lanes: [], totals: { tokens: 1000, costUsd: 0.01 } },
      { runId: "r2", epicId: "slow", status: second, startedAt: "2026-11-29T10:05:00.000Z", lanes: [], totals: { tokens: 3000, costUsd: 0.03 } },
    ],
  });
  return model;
}

class RecordingServer implements FlowServer {
  readonly calls: { name: string; arg: unknown }[] = [];
  constructor(private readonly replies: Record<string, unknown>) {}
  executeCommand<T>(command: string, arg: object): Promise<T> {
    this.calls.push({ name: command, arg });
    return Promise.resolve(this.replies[command] as T);
  }
  request<T>(method: string, params: object): Promise<T> {
    this.calls.push({ name: method, arg: params });
    return Promise.resolve(this.replies[method] as T);
  }
}

function context(server: FlowServer | undefined, model: LanesModel, status?: StatusResult): CommandContext {
  return {
    model,
    log: stub.window.createOutputChannel("flowd") as never,
    server: () => server,
    flowdPath: () => undefined,
    refresh: () => {
      if (status) model.applyStatus(status);
      return Promise.resolve(status);
    },
  };
}

describe("resumed runs are one epic with its history", () => {
  test("the tree shows the epic once, the latest run's state, the predecessor under History", () => {
    const [epic, ...others] = buildTree(resumedEpic("running"));
    assert.equal(others.length, 0);
    assert.equal(epic.label, "slow");
    assert.equal(epic.runId, "r2");
    assert.equal(epic.contextValue, "run.active");
    const history = epic.children.find((c) => c.kind === "history");
    assert.ok(history);
    assert.equal(history.description, "1 earlier run");
    assert.deepEqual(
      history.children.map((c) => [c.label, c.contextValue, c.description]),
      [["r1", "run.past", "cancelled · 0/0 done · $0.01"]],
    );
  });

  test("the epic's cost is every run's: in the tree and the status bar", () => {
    const model = resumedEpic("running");
    const [epic] = buildTree(model);
    assert.match(epic.description, / · \$0\.04$/);
    assert.equal(statusText(model), "$(sync~spin) 0/0 lanes · $0.04");
    const done = resumedEpic("done");
    assert.equal(statusText(done), "$(check) slow done · $0.04");
    const entry = done.epics()[0];
    assert.equal(epicCost(entry)?.tokens, 4000);
  });

  test("Resume offers only an epic's latest run; the predecessor resolves to it or is refused", async () => {
    assert.deepEqual(resumeTarget(resumedEpic("running"), "r1"), { problem: "flowd: epic slow is already running again (run r2)." });
    assert.deepEqual(resumeTarget(resumedEpic("done"), "r1"), { problem: "flowd: epic slow is done (run r2 resumed run r1)." });
    assert.deepEqual(resumeTarget(resumedEpic("failed"), "r1"), { runId: "r2" });
    assert.deepEqual(resumeTarget(resumedEpic("failed"), "r2"), { runId: "r2" });

    stub.reset([tmp]);
    // From the palette: r1 (cancelled, superseded) is not offered; r2 (failed) is.
    const failed = resumedEpic("failed");
    const server = new RecordingServer({ "flow.resumeEpic": { runId: "r3", epicId: "slow", epicBranch: "epic/slow" } });
    stub.answers.quickPick.push((items) => items[0]);
    await resumeRun(context(server, failed));
    const offered = (stub.recorded.quickPicks[0].items as { runId: string }[]).map((i) => i.runId);
    assert.deepEqual(offered, ["r2"]);
    assert.deepEqual(server.calls, [{ name: "flow.resumeEpic", arg: { runId: "r2" } }]);

    // From a stale node naming r1 while r2 runs: no third run.
    stub.reset([tmp]);
    const running = new RecordingServer({});
    await resumeRun(context(running, resumedEpic("running")), { runId: "r1" });
    assert.deepEqual(running.calls, []);
    assert.equal(stub.recorded.messages[0].message, "flowd: epic slow is already running again (run r2).");
  });
});

describe("a notice when a run ends", () => {
  test("once per end of a run seen going, with its outcome, the epic's cost and Open Report", async () => {
    const model = new LanesModel();
    const ended: RunEntry[] = [];
    model.onDidEndRun((run) => ended.push(run));
    // A run already over when the window first heard of it is history, not news.
    model.applyStatus({ runs: [{ runId: "old", epicId: "docs", status: "done", lanes: [] }] });
    model.apply(...runNote("r1", "auth", "running", 0, 2));
    // Where the server says the report is (a place of its own here): the notice opens that file.
    const report = path.join(tmp, "notice", "elsewhere", "report.md");
    model.apply("flow/run", { runId: "r1", epicId: "auth", status: "running", done: 0, failed: 0, skipped: 0, total: 2, reportMarkdown: report });
    model.apply(...costNote("r1", 5000, 0.12));
    model.apply(...runNote("r1", "auth", "failed", 1, 2));
    model.apply(...runNote("r1", "auth", "failed", 1, 2)); // repeated: no second notice
    model.applyStatus({ runs: [{ runId: "r1", epicId: "auth", status: "failed", lanes: [] }] });
    assert.deepEqual(
      ended.map((r) => r.runId),
      ["r1"],
    );
    assert.equal(runEndedMessage(model, ended[0]), "flowd: epic auth failed (run r1) · 0/0 stories done · $0.12");

    // The notice opens the report.
    const repo = path.join(tmp, "notice");
    fs.mkdirSync(path.dirname(report), { recursive: true });
    fs.writeFileSync(report, "# auth\n");
    stub.reset([repo]);
    stub.answers.message.push(OPEN_REPORT);
    await notifyRunEnded(context(undefined, model), ended[0]);
    assert.equal(stub.recorded.messages[0].kind, "warning");
    assert.deepEqual(stub.recorded.messages[0].items, [OPEN_REPORT]);
    const preview = stub.recorded.executed.find((e) => e.command === "markdown.showPreview");
    assert.equal((preview?.args[0] as stub.Uri).fsPath, report);
  });

  test("an end learnt from flow/status counts too; a cancel (the user's own act) is not announced", async () => {
    const model = new LanesModel();
    const ended: string[] = [];
    model.onDidEndRun((run) => ended.push(`${run.runId} ${run.status}`));
    model.applyStatus({ runs: [{ runId: "r1", epicId: "a", status: "running", lanes: [] }] });
    model.applyStatus({ runs: [{ runId: "r1", epicId: "a", status: "halted", lanes: [] }] });
    assert.deepEqual(ended, ["r1 halted"]);
    stub.reset([tmp]);
    model.apply(...runNote("r2", "b", "running"));
    model.apply(...runNote("r2", "b", "cancelled"));
    const r2 = model.run("r2");
    assert.ok(r2);
    await notifyRunEnded(context(undefined, model), r2);
    assert.deepEqual(stub.recorded.messages, []);
  });
});

describe("Show Diff Against Epic Branch on a merged lane", () => {
  let repo: string;
  beforeEach(() => {
    repo = fs.mkdtempSync(path.join(tmp, "merged-"));
    git(repo, "init", "-q", "-b", "main");
    fs.writeFileSync(path.join(repo, "README.md"), "# app\n");
    git(repo, "add", "-A");
    git(repo, "commit", "-qm", "initial");
    git(repo, "branch", "epic/auth");
    git(repo, "checkout", "-qb", "story/auth/api", "epic/auth");
    fs.mkdirSync(path.join(repo, "src"));
    fs.writeFileSync(path.join(repo, "src", "login.py"), "def login(): ...\n");
    git(repo, "add", "-A");
    git(repo, "commit", "-qm", "api: login");
    git(repo, "checkout", "-q", "epic/auth");
    git(repo, "merge", "--no-ff", "-qm", "merge story api", "story/auth/api");
    git(repo, "checkout", "-q", "main");
  });

  /** The run and lane as the server names them: `epic/auth`, `story/auth/<lane>`. */
  function named(lane: string): { run: RunEntry; lane: LaneEntry } {
    const model = new LanesModel();
    model.apply("flow/run", { runId: "r1", epicId: "auth", status: "done", done: 1, failed: 0, skipped: 0, total: 1, epicBranch: "epic/auth" });
    model.apply("flow/lane", { runId: "r1", lane, title: lane, status: "done", tokens: 0, estimated: false, branch: `story/auth/${lane}` });
    const run = model.run("r1");
    assert.ok(run);
    const entry = run.lanes.get(lane);
    assert.ok(entry);
    return { run, lane: entry };
  }

  test("diffs the story's merge against the epic before it, not the empty epic...story", () => {
    const api = named("api");
    const merged = mergeCommit(repo, api.run, api.lane);
    assert.equal(merged, git(repo, "rev-parse", "epic/auth"));
    const command = diffCommand(repo, api.run, api.lane, merged);
    assert.ok(command);
    const out = execFileSync(command[0], command.slice(1), { encoding: "utf8" });
    assert.match(out, /src\/login\.py \| 1 \+/);
    assert.match(out, /^\+def login\(\): \.\.\.$/m);
    // What the old command showed once merged: nothing.
    const old = diffCommand(repo, api.run, api.lane);
    assert.ok(old);
    assert.equal(execFileSync(old[0], old.slice(1), { encoding: "utf8" }), "");
  });

  test("a story not merged yet has no merge commit; the lane command sends the merge diff once merged", () => {
    git(repo, "branch", "story/auth/ui", "main");
    const ui = named("ui");
    const gone = named("gone");
    assert.equal(mergeCommit(repo, ui.run, ui.lane), undefined);
    assert.equal(mergeCommit(repo, gone.run, gone.lane), undefined);
    stub.reset([repo]);
    const model = new LanesModel();
    model.apply("flow/run", { runId: "r1", epicId: "auth", status: "done", done: 0, failed: 0, skipped: 0, total: 1, epicBranch: "epic/auth" });
    model.apply("flow/lane", { runId: "r1", lane: "api", title: "API", status: "done", tokens: 0, estimated: false, branch: "story/auth/api" });
    const sent = showLaneDiff(context(undefined, model), { runId: "r1", lane: "api" });
    const merged = git(repo, "rev-parse", "epic/auth");
    assert.deepEqual(sent, ["git", "-C", repo, "diff", "--stat", "--patch", `${merged}^1`, merged]);
  });
});

describe("the Lanes tree repaints only what changed", () => {
  function provider(model: LanesModel): { tree: LanesTreeProvider; fired: (string[] | "all")[] } {
    const tree = new LanesTreeProvider(model, 0);
    const fired: (string[] | "all")[] = [];
    tree.onDidChangeTreeData((e) => fired.push(e === undefined ? "all" : (Array.isArray(e) ? e : [e]).map((n) => n.id)));
    return { tree, fired };
  }

  /** Expands every node the way VS Code does: asks for the children of each shown node. */
  function expandAll(tree: LanesTreeProvider, nodes: TreeNode[] = tree.getChildren()): TreeNode[] {
    const all = [...nodes];
    for (const n of nodes) all.push(...expandAll(tree, tree.getChildren(n)));
    return all;
  }

  test("a task's progress repaints that task; a lane's status its lane and run; a new epic the roots", () => {
    const model = new LanesModel();
    const { tree, fired } = provider(model);
    model.apply(...runNote("r1", "auth", "running", 0, 2));
    model.apply("flow/lane", { runId: "r1", lane: "api", title: "API", status: "active", tokens: 0, estimated: false });
    model.apply("flow/task", { runId: "r1", lane: "api", index: 1, count: 2, title: "Hashing", state: "started" });
    const shown = expandAll(tree);
    const taskBefore = shown.find((n) => n.id === "task:r1:api:1");
    assert.ok(taskBefore);
    fired.length = 0;

    model.apply("flow/task", { runId: "r1", lane: "api", index: 1, count: 2, title: "Hashing", state: "completed" });
    assert.deepEqual(fired, [["task:r1:api:1"]]);
    // The same object VS Code holds, now showing the new state.
    assert.equal(taskBefore.description, "completed");
    assert.equal(tree.getTreeItem(taskBefore).description, "completed");

    fired.length = 0;
    model.apply("flow/lane", { runId: "r1", lane: "api", title: "API", status: "done", tokens: 10, estimated: false });
    model.apply(...runNote("r1", "auth", "running", 1, 2));
    // Two changes, two repaints (no batching at delay 0): the lane and its epic's counts, then the epic.
    assert.deepEqual(fired, [["epic:auth", "lane:r1:api"], ["epic:auth"]]);

    fired.length = 0;
    model.apply(...runNote("r9", "billing", "running"));
    assert.deepEqual(fired, ["all"]);

    fired.length = 0;
    model.apply(...runNote("r9", "billing", "running")); // nothing new
    assert.deepEqual(fired, []);
    tree.dispose();
  });
});

describe("flow/attention in the editor", () => {
  test("a perimeter repair that undid changes is shown, with nothing to answer", async () => {
    stub.reset([tmp]);
    const server = new RecordingServer({});
    const message = "story 'api': the perimeter repair restored 1 path(s) from epic/auth, undoing their changes in its worktree: src/ui/x.py (foreignOwned)";
    await showAttention(context(server, new LanesModel()), { runId: "r1", lane: "api", reason: "repaired", message, actions: [] });
    assert.deepEqual(stub.recorded.messages, [{ kind: "warning", message: `flowd: ${message}`, items: ["Show Lanes"] }]);
    assert.deepEqual(server.calls, []);
  });

  test("a pause offers its actions; the one picked goes back as flow.answer; cleared is only logged", async () => {
    stub.reset([tmp]);
    const server = new RecordingServer({ "flow.answer": {} });
    stub.answers.message.push("raise 5");
    const ctx = context(server, new LanesModel());
    await showAttention(ctx, { runId: "r1", lane: "api", reason: "budget", message: "budget reached", actions: ["raise 5", "stop"] });
    assert.deepEqual(stub.recorded.messages[0].items, ["raise 5", "stop", "Answer…", "Show Lanes"]);
    assert.deepEqual(server.calls, [{ name: "flow.answer", arg: { runId: "r1", story: "api", answer: "raise 5" } }]);
    await showAttention(ctx, { runId: "r1", lane: "api", reason: "cleared", message: "answered" });
    assert.equal(stub.recorded.messages.length, 1);
  });

  test("Answer… takes free text in an input box and sends it as flow.answer; escaping sends nothing", async () => {
    stub.reset([tmp]);
    const server = new RecordingServer({ "flow.answer": {} });
    const ctx = context(server, new LanesModel());
    const blocked = { runId: "r1", lane: "api", reason: "blocked", message: "Story api is blocked on x. What should its coder know?", actions: ["stop"] };
    stub.answers.message.push("Answer…");
    stub.answers.inputBox.push("  the schema is in db/schema.sql ");
    assert.equal(await showAttention(ctx, blocked), "the schema is in db/schema.sql");
    assert.deepEqual(stub.recorded.messages[0].items, ["stop", "Answer…", "Show Lanes"]);
    assert.deepEqual(server.calls, [{ name: "flow.answer", arg: { runId: "r1", story: "api", answer: "the schema is in db/schema.sql" } }]);
    stub.answers.message.push("Answer…");
    stub.answers.inputBox.push(undefined);
    assert.equal(await showAttention(ctx, blocked), undefined);
    assert.equal(server.calls.length, 1);
    // A failed story has nothing to answer: no Answer… button.
    await showAttention(ctx, { runId: "r1", lane: "ui", reason: "failed", message: "story ui failed", actions: [] });
    assert.deepEqual(stub.recorded.messages.at(-1)?.items, ["Show Lanes"]);
  });

  test("the waiting count: pauses and failures open, cleared closes, repairs never count", () => {
    const tracker = new AttentionTracker();
    let changes = 0;
    tracker.onDidChange(() => changes++);
    tracker.apply({ runId: "r1", lane: "api", reason: "blocked", message: "m", actions: ["stop"] });
    tracker.apply({ runId: "r1", reason: "budget", message: "m", actions: ["raise 5", "stop"] });
    tracker.apply({ runId: "r1", lane: "ui", reason: "repaired", message: "m", actions: [] });
    assert.equal(tracker.count, 2);
    assert.equal(attentionText(tracker.count), " $(bell) 2");
    assert.deepEqual(attentionBadge(tracker.count), { value: 2, tooltip: "2 stories wait on you" });
    tracker.apply({ runId: "r1", lane: "api", reason: "cleared", message: "answered", actions: [] });
    tracker.apply({ runId: "r1", reason: "cleared", message: "answered", actions: [] });
    assert.equal(tracker.count, 0);
    assert.equal(attentionText(0), "");
    assert.equal(attentionBadge(0), undefined);
    assert.equal(changes, 4);
  });
});

describe("small fixes", () => {
  test("a clean exit of the server is logged as info; real failures stay errors", () => {
    assert.equal(clientLogLine("[Error - 10:01:02 AM] Server process exited with code 0."), "[Info  - 10:01:02 AM] Server process exited with code 0.");
    assert.equal(clientLogLine("[Error - 10:01:02 AM] Server process exited with code 1."), "[Error - 10:01:02 AM] Server process exited with code 1.");
    // Frozen, as VS Code's own output channels are (a Proxy over one throws on every call).
    const channel = Object.freeze(stub.window.createOutputChannel("flowd"));
    const wrapped = clientLogChannel(channel);
    wrapped.appendLine("[Error - 9:00:00] Server process exited with code 0.");
    wrapped.append("raw");
    wrapped.clear();
    wrapped.appendLine("after clear");
    assert.deepEqual(channel.lines, ["after clear"]);
    assert.equal(wrapped.name, "flowd");
    const plain = stub.window.createOutputChannel("flowd");
    clientLogChannel(plain).appendLine("[Error - 9:00:00] Server process exited with code 0.");
    assert.deepEqual(plain.lines, ["[Info  - 9:00:00] Server process exited with code 0."]);
  });

  test("the cost report preview keeps [prices.<model>] and leaves code alone", async () => {
    const text = "# Cost\n\n(USD per million tokens; [prices.<model>] in .flow/config.toml overrides)\n\n`<x>` stays\n```\n<raw>\n```\n> quoted\n";
    assert.equal(escapeAngleBrackets(text), text.replace("[prices.<model>]", "[prices.&lt;model>]"));
    stub.reset([tmp]);
    const server = new RecordingServer({ "flow/costReport": { text } });
    await showCostReport(context(server, new LanesModel()));
    assert.match(stub.recorded.documents[0].content, /\[prices\.&lt;model>\]/);
  });

  test("a folder that is a story worktree is served from the main checkout", () => {
    const repo = fs.mkdtempSync(path.join(tmp, "main-"));
    git(repo, "init", "-q", "-b", "main");
    fs.mkdirSync(path.join(repo, "src"));
    fs.writeFileSync(path.join(repo, "src", "a.py"), "");
    git(repo, "add", "-A");
    git(repo, "commit", "-qm", "initial");
    const wt = path.join(tmp, `${path.basename(repo)}.flowd`, "auth", "api");
    git(repo, "worktree", "add", "-q", "-b", "story/auth/api", wt);
    assert.equal(mainCheckout(wt), repo);
    assert.equal(mainCheckout(path.join(wt)), repo);
    assert.equal(mainCheckout(path.join(repo, "src")), repo);
    assert.equal(mainCheckout(repo), repo);
    const plain = fs.mkdtempSync(path.join(os.tmpdir(), "flowd-nogit-"));
    try {
      assert.equal(mainCheckout(plain), plain);
    } finally {
      fs.rmSync(plain, { recursive: true, force: true });
    }
  });

  describe("the TCP token file", () => {
    let dir: string;
    beforeEach(() => {
      dir = fs.mkdtempSync(path.join(tmp, "runtime-"));
    });
    afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

    test("is read from $XDG_RUNTIME_DIR/flowd, else ~/.cache/flowd", () => {
      assert.equal(tokenFile(4711, { XDG_RUNTIME_DIR: dir }), path.join(dir, "flowd", "serve-4711.json"));
      assert.equal(tokenFile(4711, { HOME: dir }), path.join(dir, ".cache", "flowd", "serve-4711.json"));
      assert.equal(tokenFile(4711, { HOME: dir, XDG_RUNTIME_DIR: path.join(dir, "gone") }), path.join(dir, ".cache", "flowd", "serve-4711.json"));
      fs.mkdirSync(path.join(dir, "flowd"));
      fs.writeFileSync(path.join(dir, "flowd", "serve-4711.json"), JSON.stringify({ port: 4711, token: "s3cret" }), { mode: 0o600 });
      assert.deepEqual(readToken(4711, { XDG_RUNTIME_DIR: dir }), { token: "s3cret" });
    });

    test("a missing, broken or foreign file is one sentence naming it", () => {
      const env = { XDG_RUNTIME_DIR: dir };
      const file = path.join(dir, "flowd", "serve-5000.json");
      assert.deepEqual(readToken(5000, env), {
        problem: `flowd: no server token at ${file}; start \`flowd serve --tcp --port 5000\` as this user, or clear flowd.server.port`,
      });
      fs.mkdirSync(path.join(dir, "flowd"));
      fs.writeFileSync(file, "{not json");
      assert.match((readToken(5000, env) as { problem: string }).problem, /serve-5000\.json is not readable JSON/);
      fs.writeFileSync(file, JSON.stringify({ port: 5001, token: "x" }));
      assert.deepEqual(readToken(5000, env), { problem: `flowd: ${file} is for port 5001, not 5000` });
      fs.writeFileSync(file, JSON.stringify({ port: 5000 }));
      assert.deepEqual(readToken(5000, env), { problem: `flowd: ${file} has no "token"; restart \`flowd serve --tcp\`` });
    });
  });
});
