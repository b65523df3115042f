import { SHOW_GRAPH } from "../src/graphView";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import {
  BROWSE_LABEL,
  cancelRun,
  CommandContext,
  launchEpic,
  LANES_CONTAINER_COMMAND,
  registerCommands,
  resumeRun,
  showCostReport,
  showLaneReport,
  validatePlan,
} from "../src/commands";
import { registerApproval } from "../src/approvalView";
import { LanesModel } from "../src/lanesModel";
import { FlowServer, StatusResult } from "../src/protocol";
import { ADD_REVISION_COMMAND } from "../src/reviewComments";
import { RUN_ID, START } from "./fixtures/sequence";
import * as stub from "./stubs/vscode";

/** The server's side of the calls, answered from a table; every call is recorded. */
class RecordingServer implements FlowServer {
  readonly calls: { kind: "command" | "request"; name: string; arg: unknown }[] = [];
  constructor(private readonly replies: Record<string, unknown>) {}

  private reply<T>(name: string): Promise<T> {
    const value = this.replies[name];
    if (value instanceof Error) return Promise.reject(value);
    if (value === undefined) return Promise.reject(new Error(`Unhandled method ${name}`));
    return Promise.resolve(value as T);
  }

  executeCommand<T>(command: string, arg: object): Promise<T> {
    this.calls.push({ kind: "command", name: command, arg });
    return this.reply<T>(command);
  }

  request<T>(method: string, params: object): Promise<T> {
    this.calls.push({ kind: "request", name: method, arg: params });
    return this.reply<T>(method);
  }

  commands(): { name: string; arg: unknown }[] {
    return this.calls.filter((c) => c.kind === "command").map(({ name, arg }) => ({ name, arg }));
  }
}

const STATUS: StatusResult = {
  runs: [
    { runId: "r-live", epicId: "auth", status: "running", startedAt: "2026-11-29T14:03:07.412Z", lanes: [{ runId: "r-live", lane: "api", title: "API", status: "active", tokens: 10, estimated: false }] },
    { runId: "r-failed", epicId: "billing", status: "failed", lanes: [] },
    { runId: "r-halted", epicId: "search", status: "halted", lanes: [] },
    { runId: "r-done", epicId: "docs", status: "done", lanes: [] },
  ],
};

let workspace: string;

function write(rel: string, text: string): string {
  const file = path.join(workspace, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

function context(server: FlowServer | undefined, model = new LanesModel()): CommandContext & { log: stub.StubOutputChannel } {
  const log = stub.window.createOutputChannel("flowd");
  return {
    model,
    log: log as never,
    server: () => server,
    flowdPath: () => undefined,
    // Like the real one (ServerManager.refresh): never rejects, a failure is only logged.
    refresh: async () => {
      if (!server) return undefined;
      try {
        const status = await server.request<StatusResult>("flow/status", {});
        model.applyStatus(status);
        return status;
      } catch (err) {
        log.appendLine(`[error] flow/status: ${String(err)}`);
        return undefined;
      }
    },
  };
}

/** Answers the next quick pick with the item whose label is `label` (and checks it was offered). */
function pick(label: string): void {
  stub.answers.quickPick.push((items) => {
    const found = (items as { label: string }[]).find((i) => i.label === label);
    assert.ok(found, `no quick pick item ${label}`);
    return found;
  });
}

function labels(quickPick = 0): string[] {
  return (stub.recorded.quickPicks[quickPick].items as { label: string }[]).map((i) => i.label);
}

beforeEach(() => {
  workspace = fs.mkdtempSync(path.join(os.tmpdir(), "flowd-ext-"));
  stub.reset([workspace]);
});

afterEach(() => {
  fs.rmSync(workspace, { recursive: true, force: true });
});

const ALL_PAUSES = ["budget", "blocked", "noExecutor"];

describe("Flow: Launch Epic", () => {
  test("quick pick of JSON and Markdown plans, then concurrency → flow.launchEpic {plan, concurrency}", async () => {
    write("auth.epic.json", '{"epicId": "auth", "stories": []}');
    const markdownPlan = write("docs/billing.md", "# Billing\n\n```json storyplan\n{}\n```\n");
    write("docs/notes.md", "# Notes\n\n```json\n{}\n```\n");
    write("node_modules/x/y.epic.json", "{}");
    const server = new RecordingServer({ "flow.launchEpic": { runId: "r1", epicId: "billing", epicBranch: "epic/billing" }, "flow/status": { runs: [] } });
    pick("billing.md");
    stub.answers.inputBox.push("2");

    const result = await launchEpic(context(server));

    assert.deepEqual(labels(), ["auth.epic.json", "billing.md", BROWSE_LABEL]);
    assert.deepEqual(server.commands(), [{ name: "flow.launchEpic", arg: { plan: markdownPlan, pauseOn: ALL_PAUSES, concurrency: 2 } }]);
    assert.deepEqual(result, { runId: "r1", epicId: "billing", epicBranch: "epic/billing" });
    assert.match(stub.recorded.messages[0].message, /epic billing launched \(run r1, branch epic\/billing\)/);
    assert.ok(stub.recorded.executed.some((e) => e.command === LANES_CONTAINER_COMMAND));
  });

  test("the concurrency prompt is pre-filled from flowd.defaultConcurrency, checked, and may be left empty", async () => {
    const plan = write("auth.epic.json", "{}");
    stub.settings.set("flowd.defaultConcurrency", 4);
    const server = new RecordingServer({ "flow.launchEpic": { runId: "r1", epicId: "auth", epicBranch: "epic/auth" }, "flow/status": { runs: [] } });
    pick("auth.epic.json");
    stub.answers.inputBox.push("");

    await launchEpic(context(server));

    const box = stub.recorded.inputBoxes[0];
    assert.equal(box.value, "4");
    assert.equal(box.validate?.("0"), "A whole number of stories, 1 or more, or empty.");
    assert.equal(box.validate?.("two"), "A whole number of stories, 1 or more, or empty.");
    assert.equal(box.validate?.("3"), undefined);
    assert.equal(box.validate?.(""), undefined);
    assert.deepEqual(server.commands(), [{ name: "flow.launchEpic", arg: { plan, pauseOn: ALL_PAUSES } }]);
  });

  test("runs launched from the editor pause and ask by default; flowd.pauseOn changes what on", async () => {
    const plan = write("auth.epic.json", "{}");
    stub.settings.set("flowd.pauseOn", ["budget"]);
    const server = new RecordingServer({ "flow.launchEpic": { runId: "r1", epicId: "auth", epicBranch: "epic/auth" }, "flow/status": { runs: [] } });
    pick("auth.epic.json");
    stub.answers.inputBox.push("");
    await launchEpic(context(server));
    assert.deepEqual(server.commands(), [{ name: "flow.launchEpic", arg: { plan, pauseOn: ["budget"] } }]);
  });

  test("flowd.pauseOnMerge (off by default) adds merge: each finished story waits for approval", async () => {
    const plan = write("auth.epic.json", "{}");
    stub.settings.set("flowd.pauseOnMerge", true);
    const server = new RecordingServer({ "flow.launchEpic": { runId: "r1", epicId: "auth", epicBranch: "epic/auth" }, "flow/status": { runs: [] } });
    pick("auth.epic.json");
    stub.answers.inputBox.push("");
    await launchEpic(context(server));
    assert.deepEqual(server.commands(), [{ name: "flow.launchEpic", arg: { plan, pauseOn: [...ALL_PAUSES, "merge"] } }]);
  });

  test("escaping the pick or the prompt launches nothing", async () => {
    write("auth.epic.json", "{}");
    const server = new RecordingServer({});
    await launchEpic(context(server)); // no quick pick answer: escaped
    pick("auth.epic.json");
    stub.answers.inputBox.push(undefined);
    await launchEpic(context(server));
    assert.deepEqual(server.calls, []);
  });

  test("with no plan in the workspace it offers to draft one", async () => {
    const server = new RecordingServer({});
    await launchEpic(context(server));
    assert.equal(stub.recorded.messages[0].kind, "warning");
    assert.match(stub.recorded.messages[0].message, /no plan in this workspace/);
    assert.deepEqual(stub.recorded.messages[0].items, ["Browse…", "Draft Epic Plan"]);
    assert.deepEqual(server.calls, []);
  });

  test("Browse… launches a plan outside the workspace, passed as its absolute path", async () => {
    write("auth.epic.json", "{}");
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), "flowd-plan-elsewhere-"));
    try {
      const outside = path.join(elsewhere, "far.epic.json");
      fs.writeFileSync(outside, "{}");
      const server = new RecordingServer({ "flow.launchEpic": { runId: "r9", epicId: "far", epicBranch: "epic/far" }, "flow/status": { runs: [] } });
      pick(BROWSE_LABEL);
      stub.answers.openDialog.push([stub.Uri.file(outside)]);
      stub.answers.inputBox.push("");
      await launchEpic(context(server));
      assert.equal(stub.recorded.openDialogs.length, 1);
      assert.deepEqual(server.commands(), [{ name: "flow.launchEpic", arg: { plan: outside, pauseOn: ALL_PAUSES } }]);
      assert.ok(!stub.recorded.messages.some((m) => m.kind !== "info"), JSON.stringify(stub.recorded.messages));
    } finally {
      fs.rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  test("a server error is shown as one message and logged", async () => {
    write("auth.epic.json", "{}");
    const server = new RecordingServer({ "flow.launchEpic": new Error("auth.epic.json: stories[0].owned: a story must own at least one path") });
    const ctx = context(server);
    pick("auth.epic.json");
    stub.answers.inputBox.push("");
    assert.equal(await launchEpic(ctx), undefined);
    assert.equal(stub.recorded.messages[0].kind, "error");
    assert.equal(stub.recorded.messages[0].message, "flowd: launching the epic failed: auth.epic.json: stories[0].owned: a story must own at least one path");
    assert.ok(ctx.log.lines.some((l) => l.includes("must own at least one path")));
  });

  test("without a running server it says so and asks nothing", async () => {
    write("auth.epic.json", "{}");
    await launchEpic(context(undefined));
    assert.equal(stub.recorded.messages[0].kind, "error");
    assert.match(stub.recorded.messages[0].message, /language server is not running/);
    assert.equal(stub.recorded.quickPicks.length, 0);
  });
});

describe("Flow: Cancel Run and Flow: Resume Run", () => {
  test("cancel picks among the active runs of flow/status", async () => {
    const server = new RecordingServer({ "flow/status": STATUS, "flow.cancelEpic": { runId: "r-live", outcome: "cancelled" } });
    pick("auth");
    const result = await cancelRun(context(server));
    assert.deepEqual(labels(), ["auth"]);
    assert.deepEqual(server.commands(), [{ name: "flow.cancelEpic", arg: { runId: "r-live" } }]);
    assert.deepEqual(result, { runId: "r-live", outcome: "cancelled" });
    assert.match(stub.recorded.messages[0].message, /run r-live cancelled; it can be resumed/);
  });

  test("resume picks among failed, cancelled and halted runs", async () => {
    const server = new RecordingServer({ "flow/status": STATUS, "flow.resumeEpic": { runId: "r-halted", epicId: "search", epicBranch: "epic/search" } });
    pick("search");
    await resumeRun(context(server));
    assert.deepEqual(new Set(labels()), new Set(["billing", "search"]));
    assert.deepEqual(server.commands(), [{ name: "flow.resumeEpic", arg: { runId: "r-halted" } }]);
  });

  test("from a run node in the Lanes view, no pick is needed", async () => {
    const server = new RecordingServer({ "flow.cancelEpic": { runId: "r9", outcome: "cancelled" } });
    await cancelRun(context(server), { runId: "r9" });
    assert.equal(stub.recorded.quickPicks.length, 0);
    assert.deepEqual(server.commands(), [{ name: "flow.cancelEpic", arg: { runId: "r9" } }]);
  });

  test("nothing to cancel: one message, no command", async () => {
    const server = new RecordingServer({ "flow/status": { runs: [STATUS.runs[3]] } });
    await cancelRun(context(server));
    assert.equal(stub.recorded.quickPicks.length, 0);
    assert.equal(stub.recorded.messages[0].message, "flowd: no active run to cancel.");
    assert.deepEqual(server.commands(), []);
  });
});

describe("Flow: Show Cost Report", () => {
  test("asks for Markdown and opens it in an untitled document with its preview", async () => {
    const text = "# Cost report\n\n| model | cost |\n| --- | --- |\n| claude-sonnet-4-5 | $1.42 |\n";
    const server = new RecordingServer({ "flow/costReport": { text } });
    const doc = await showCostReport(context(server));
    assert.deepEqual(server.calls, [{ kind: "request", name: "flow/costReport", arg: { format: "markdown" } }]);
    assert.equal(stub.recorded.documents.length, 1);
    assert.equal(stub.recorded.documents[0].languageId, "markdown");
    assert.equal(stub.recorded.documents[0].content, text);
    const preview = stub.recorded.executed.find((e) => e.command === "markdown.showPreview");
    assert.ok(preview && doc);
    assert.equal(preview.args[0], doc.uri);
  });

  test("for one run, from its node", async () => {
    const server = new RecordingServer({ "flow/costReport": { text: "# Run r1\n" } });
    await showCostReport(context(server), { runId: "r1" });
    assert.deepEqual(server.calls[0].arg, { runId: "r1", format: "markdown" });
  });
});

describe("Flow: Validate Plan", () => {
  test("violations are listed in the log and summed up in a warning", async () => {
    const plan = write("auth.epic.json", "{}");
    const violations = ["auth.epic.json: stories[1].id 'Bad Id' is not kebab-case", "auth.epic.json: dependency cycle a → b → a"];
    const server = new RecordingServer({ "flow.validatePlan": { violations } });
    const ctx = context(server);
    pick("auth.epic.json");
    await validatePlan(ctx);
    assert.deepEqual(server.commands(), [{ name: "flow.validatePlan", arg: { plan } }]);
    assert.equal(stub.recorded.messages[0].kind, "warning");
    assert.match(stub.recorded.messages[0].message, /has 2 violations: auth.epic.json: stories\[1\]/);
    assert.ok(ctx.log.lines.includes("  - auth.epic.json: dependency cycle a → b → a"));
  });

  test("the plan open in the editor is validated without asking", async () => {
    const plan = write("auth.epic.json", "{}");
    stub.window.activeTextEditor = { document: { uri: stub.Uri.file(plan), getText: () => "{}" } };
    const server = new RecordingServer({ "flow.validatePlan": { violations: [] } });
    await validatePlan(context(server));
    assert.equal(stub.recorded.quickPicks.length, 0);
    assert.equal(stub.recorded.messages[0].message, "flowd: auth.epic.json is a valid plan.");
  });
});

describe("lane actions", () => {
  test("the report line comes from the epic's report.json once written, else from the live lane", () => {
    const model = new LanesModel();
    for (const [m, p] of START) model.apply(m, p);
    const ctx = context(undefined, model);
    // Where the server says the report is: a place of its own here, not `.flow/epics/<epic>/`.
    const reportJson = path.join(workspace, "reports", "auth.json");
    model.apply("flow/run", { runId: RUN_ID, epicId: "auth", status: "running", done: 0, failed: 0, skipped: 0, total: 1, reportJson });
    const live = showLaneReport(ctx, { runId: RUN_ID, lane: "api" });
    assert.equal(live, "api: active · claude#1 · task 1/3 Password hashing · 4.2k tok · $0.05 (live; the report is written when the run ends)");
    write(".flow/epics/auth/report.json", "{}"); // where flowd's default would be: not read
    assert.equal(showLaneReport(ctx, { runId: RUN_ID, lane: "api" }), live);
    write("reports/auth.json", JSON.stringify({
      epicId: "auth",
      epicBranch: "epic/auth",
      stories: [{ id: "api", title: "Login API", status: "done", branch: "story/auth/api", executor: "claude", tokens: 27500, costUsd: 0.38 }],
    }));
    assert.equal(showLaneReport(ctx, { runId: RUN_ID, lane: "api" }), "api: done · story/auth/api · claude · 27.5k tok · $0.38");
    assert.equal(stub.recorded.messages[2].message, "api: done · story/auth/api · claude · 27.5k tok · $0.38");
  });
});

describe("registration", () => {
  test("palette ids never collide with the server's own command ids", async () => {
    const ctx = context(undefined);
    // The language client registers the server's executeCommandProvider ids; simulate that first.
    for (const id of ["flow.launchEpic", "flow.cancelEpic", "flow.resumeEpic", "flow.validatePlan"]) stub.commands.registerCommand(id, () => undefined);
    const disposables = registerCommands(ctx, { restart: () => Promise.resolve() });
    const approval = registerApproval(ctx); // beside them in extension.ts: 3 commands and the diff's content provider
    const ids = await stub.commands.getCommands();
    assert.equal(ids.length, 4 + disposables.length + approval.length - 1);
    const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8")) as {
      contributes: { commands: { command: string }[] };
      activationEvents: string[];
    };
    // Registered beside its comment controller and the graph panel in extension.ts (see activate.test.ts).
    const contributed = manifest.contributes.commands
      .map((c) => c.command)
      .filter((id) => id !== ADD_REVISION_COMMAND && id !== SHOW_GRAPH)
      .sort();
    assert.deepEqual(ids.filter((id) => id.startsWith("flowd.")).sort(), contributed);
    for (const id of ["flowd.launchEpic", "flowd.cancelRun", "flowd.resumeRun", "flowd.validatePlan", "flowd.showCostReport", "flowd.draftPlan"]) {
      assert.ok(manifest.activationEvents.includes(`onCommand:${id}`), id);
    }
    for (const d of disposables) d.dispose();
  });
});
