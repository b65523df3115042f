// Wire tests: the real `flowd serve` (FLOWD_BIN) over stdio through vscode-jsonrpc — the transport
// vscode-languageclient itself uses — on a real git repository with flowd's scripted agent as
// the only stand-in (at the model boundary). Every flow/* notification feeds the same LanesModel
// the extension uses, and the assertions read the tree and the status text built from it.
//
// They need FLOWD_BIN (`make test` sets it to the repository's .venv/bin/flowd). Without it they
// fail, saying so; FLOWD_WIRE=0 opts out explicitly (for a quick UI-only loop).

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { createMessageConnection, MessageConnection, ResponseError, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { draftPlan, resumeRun, resumeTarget, runEndedMessage } from "../src/commands";
import { costPhrase, formatUsd } from "../src/format";
import { diffCommand, findWorktree, mergeCommit, reportLine } from "../src/laneActions";
import { buildTree, TreeNode } from "../src/laneTree";
import { epicCost, feedModel, LanesModel, RunEntry } from "../src/lanesModel";
import { escapeAngleBrackets } from "../src/markdown";
import { mainCheckout } from "../src/repoRoot";
import { connectLoopback, readToken } from "../src/tcp";
import { Commands, FlowServer, isRunActive, LaunchResult, Requests, StatusResult, ValidateResult } from "../src/protocol";
import { statusText } from "../src/statusText";
import * as stub from "./stubs/vscode";

const FLOWD_BIN = process.env.FLOWD_BIN ?? "";
const WIRE = process.env.FLOWD_WIRE !== "0";

// ------------------------------------------------------------------------ sample repo ---

const EPIC = "auth";

const PLAN = {
  epicId: EPIC,
  epic: "Add password login",
  stories: [
    { id: "api", title: "Login API", description: "POST /login.", owned: ["src/api/"], acceptance: ["login() exists"] },
    { id: "ui", title: "Login page", description: "A form.", owned: ["src/ui/"], acceptance: ["page() exists"] },
    { id: "docs", title: "Document login", description: "How to log in.", owned: ["docs/"], dependsOn: ["api"], acceptance: ["docs/login.md"] },
  ],
};

const DRAFT_MARK = "ZEBRA-DRAFT";
const DRAFTED = {
  epicId: "billing",
  epic: `Add invoices ${DRAFT_MARK}`,
  stories: [
    {
      id: "invoices",
      title: "Invoices",
      description: "Model and API.",
      owned: ["src/billing/"],
      acceptance: ["an Invoice model with a total", "POST /invoices creates one"],
    },
  ],
};

const usage = (input: number, output: number, costUsd: number) => ({ input, output, cachedRead: 0, cacheWrite: 0, costUsd });
const tasks = (...items: [string, string][]) => JSON.stringify({ tasks: items.map(([title, description]) => ({ title, description })) });
const clean = JSON.stringify({ issues: [], summary: "Looks right." });

const SCRIPT = {
  model: "scripted",
  rules: [
    { when: { role: "planner", prompt: DRAFT_MARK }, reply: JSON.stringify(DRAFTED), usage: usage(500, 200, 0.002) },
    {
      when: { role: "planner", story: "api" },
      reply: tasks(["Password hashing", "Write src/api/hashing.py. Satisfies: 1"], ["Login handler", "Write src/api/login.py. Satisfies: 1"]),
      usage: usage(900, 150, 0.003),
    },
    { when: { role: "planner", story: "ui" }, reply: tasks(["Login form", "Write src/ui/page.py. Satisfies: 1"]), usage: usage(800, 100, 0.002) },
    { when: { role: "planner", story: "docs" }, reply: tasks(["Login how-to", "Write docs/login.md. Satisfies: 1"]), usage: usage(700, 90, 0.002) },
    { when: { role: "coder", story: "api", task: "hashing" }, delayMs: 100, writes: { "src/api/hashing.py": "def hash_password(p: str) -> str:\n    return p[::-1]\n" }, reply: "Hashing done.", usage: usage(4200, 600, 0.021) },
    { when: { role: "coder", story: "api", task: "handler" }, delayMs: 100, writes: { "src/api/login.py": "def login() -> bool:\n    return True\n" }, reply: "Handler done.", usage: usage(3100, 380, 0.015) },
    { when: { role: "coder", story: "ui" }, delayMs: 150, writes: { "src/ui/page.py": "def page() -> str:\n    return '<form></form>'\n" }, reply: "Form done.", usage: usage(2600, 300, 0.012) },
    { when: { role: "coder", story: "docs" }, delayMs: 100, writes: { "docs/login.md": "# Logging in\n" }, reply: "Docs done.", usage: usage(1800, 260, 0.009) },
    { when: { role: "planner", story: "slow-story" }, reply: tasks(["Slow task", "Write src/slow/a.py. Satisfies: 1"]), usage: usage(500, 50, 0.001) },
    // Long enough to cancel the run while this coder works; a resumed run finishes it.
    { when: { role: "coder", story: "slow-story" }, delayMs: 4000, writes: { "src/slow/a.py": "A = 1\n" }, reply: "Slow done.", usage: usage(1000, 100, 0.004) },
    { when: { role: "reviewer" }, reply: clean, usage: usage(1500, 120, 0.006) },
    { when: { role: "judge" }, reply: clean, usage: usage(2000, 150, 0.008) },
  ],
};

const ROSTER = `[[executors]]
id = "demo"
kind = "script"
script = "demo.script.json"
roles = ["planner", "coder", "reviewer", "judge"]
slots = 3
coderSlots = 2
`;

const SLOW_PLAN = {
  epicId: "slow",
  epic: "A slow epic to cancel and resume",
  stories: [{ id: "slow-story", title: "Slow story", description: "Takes a while.", owned: ["src/slow/"], acceptance: ["src/slow/a.py"] }],
};

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=flowd test", "-c", "user.email=test@flowd.invalid", ...args], { cwd, encoding: "utf8" });
}

/** A git repository with the plan committed and a scripted roster in `.flow/` (docs/running.md, docs/scripted-agent.md). */
function makeRepo(base: string): { repo: string; plan: string } {
  const repo = path.join(base, "app");
  fs.mkdirSync(path.join(repo, "src"), { recursive: true });
  fs.writeFileSync(path.join(repo, "README.md"), "# app\n");
  fs.writeFileSync(path.join(repo, "src", "__init__.py"), "");
  const plan = path.join(repo, `${EPIC}.epic.json`);
  fs.writeFileSync(plan, JSON.stringify(PLAN, null, 2) + "\n");
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", "-A");
  git(repo, "commit", "-q", "-m", "initial");
  fs.mkdirSync(path.join(repo, ".flow"));
  fs.writeFileSync(path.join(repo, ".flow", "roster.toml"), ROSTER);
  fs.writeFileSync(path.join(repo, ".flow", "demo.script.json"), JSON.stringify(SCRIPT, null, 2));
  fs.writeFileSync(path.join(repo, ".flow", "config.toml"), "concurrency = 2\njudgeRounds = 1\nmaxReviewRounds = 1\n");
  return { repo, plan };
}

// ----------------------------------------------------------------------------- client ---

interface Session {
  conn: MessageConnection;
  proc: ChildProcess;
  /** The daemon `flowd serve` connected to is the test's too: stopped with the session. */
  stopDaemon: () => void;
  model: LanesModel;
  server: FlowServer;
  notes: { method: string; params: unknown }[];
  stderr: string[];
  initializeResult: { capabilities: { executeCommandProvider?: { commands: string[] } } };
  exited: Promise<number | null>;
  /**
   * Resolves once `ready(model)` holds, re-checked after every notification. A guard rejects
   * after `guardMs` with what the server sent, so a stuck run fails readably, not by a bare timeout.
   */
  until(ready: (model: LanesModel) => boolean, guardMs?: number): Promise<void>;
}

function isolatedEnv(home: string): NodeJS.ProcessEnv {
  // A user's ~/.config/flowd/roster.toml must not leak into the test's roster, and the scripted
  // agent's `times` bookkeeping stays in the test's temp dir (removed with it).
  return { ...process.env, ...isolatedVars(home), NO_COLOR: "1" };
}

function isolatedVars(home: string): Record<string, string> {
  return { HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), FLOWD_SCRIPT_STATE: path.join(home, "script-state") };
}

async function startSession(repo: string, home: string): Promise<Session> {
  const env = isolatedEnv(home);
  const proc = spawn(FLOWD_BIN, ["serve"], { cwd: repo, env, stdio: ["pipe", "pipe", "pipe"] });
  const stopDaemon = (): void => stopDaemonOf(repo, env);
  const exited = new Promise<number | null>((resolve) => proc.on("exit", (code) => resolve(code)));
  const stderr: string[] = [];
  proc.stderr?.setEncoding("utf8").on("data", (d: string) => stderr.push(d));
  const conn = createMessageConnection(new StreamMessageReader(proc.stdout), new StreamMessageWriter(proc.stdin));
  const model = new LanesModel();
  const notes: Session["notes"] = [];
  const waiters: { ready: (m: LanesModel) => boolean; resolve: () => void }[] = [];
  feedModel(model, (method, handler) =>
    conn.onNotification(method, (params: unknown) => {
      notes.push({ method, params });
      handler(params);
      for (const w of [...waiters]) {
        if (w.ready(model)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    }),
  );
  conn.onNotification((method: string, params: unknown) => notes.push({ method, params }));
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.onRequest("client/registerCapability", () => null);
  conn.onRequest("client/unregisterCapability", () => null);
  conn.onRequest("workspace/configuration", (p: { items: unknown[] }) => p.items.map(() => null));
  conn.onRequest("window/showMessageRequest", () => null);
  conn.listen();
  const rootUri = `file://${repo}`;
  const initializeResult = await conn.sendRequest<Session["initializeResult"]>("initialize", {
    processId: process.pid,
    clientInfo: { name: "flowd-vscode-wire-test" },
    rootUri,
    workspaceFolders: [{ uri: rootUri, name: path.basename(repo) }],
    capabilities: {
      window: { workDoneProgress: true },
      workspace: { workspaceFolders: true, configuration: true, executeCommand: {}, didChangeWatchedFiles: { dynamicRegistration: true } },
      textDocument: { publishDiagnostics: { relatedInformation: true }, synchronization: { didSave: true } },
    },
  });
  await conn.sendNotification("initialized", {});
  const server: FlowServer = {
    executeCommand: <T>(command: string, arg: object) => conn.sendRequest<T>("workspace/executeCommand", { command, arguments: [arg] }),
    request: <T>(method: string, params: object) => conn.sendRequest<T>(method, params),
  };
  const until = (ready: (m: LanesModel) => boolean, guardMs = 120_000): Promise<void> => {
    if (ready(model)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const guard = setTimeout(() => {
        const last = notes.slice(-15).map((n) => `${n.method} ${JSON.stringify(n.params)}`);
        reject(new Error(`the server never got there; last notifications:\n${last.join("\n")}\nstderr:\n${stderr.join("").slice(-3000)}`));
      }, guardMs);
      waiters.push({
        ready,
        resolve: () => {
          clearTimeout(guard);
          resolve();
        },
      });
    });
  };
  return { conn, proc, stopDaemon, model, server, notes, stderr, initializeResult, exited, until };
}

/** `flowd daemon stop` for the repository's daemon, which outlives its sessions by design. */
function stopDaemonOf(repo: string, env: NodeJS.ProcessEnv): void {
  try {
    execFileSync(FLOWD_BIN ?? "flowd", ["daemon", "stop"], { cwd: repo, env, stdio: "ignore", timeout: 30_000 });
  } catch {
    // none ran (a session served in-process), or it is gone already
  }
}

async function stopSession(s: Session): Promise<number | null> {
  // Tidy even when the server misbehaves: the process must not outlive the test.
  const guard = setTimeout(() => s.proc.kill("SIGKILL"), 10_000);
  try {
    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
  } catch {
    s.proc.kill("SIGKILL");
  }
  const code = await s.exited;
  clearTimeout(guard);
  s.conn.dispose();
  s.stopDaemon();
  return code;
}

function node(nodes: TreeNode[], label: string): TreeNode {
  const found = nodes.find((n) => n.label === label);
  assert.ok(found, `no node ${label} among ${nodes.map((n) => n.label).join(", ")}`);
  return found;
}

// ------------------------------------------------------------------------------ tests ---

if (!WIRE) {
  process.stderr.write("wire tests opted out with FLOWD_WIRE=0\n");
} else if (!FLOWD_BIN) {
  test("wire tests need FLOWD_BIN=/path/to/flowd (make test sets it)", () => {
    assert.fail("FLOWD_BIN is not set: run `make test` from the repository root, or set FLOWD_WIRE=0 to opt out");
  });
} else {
  describe("wire: flowd serve", { timeout: 240_000 }, () => {
    let tmp: string;
    let repo: string;
    let plan: string;
    let home: string;
    let session: Session;
    const ended: RunEntry[] = [];

    before(async () => {
      tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-wire-")));
      home = path.join(tmp, "home");
      fs.mkdirSync(home);
      ({ repo, plan } = makeRepo(tmp));
      session = await startSession(repo, home);
      session.model.onDidEndRun((run) => ended.push(run));
    });

    after(async () => {
      if (session) {
        for (const run of session.model.activeRuns()) {
          await session.server.executeCommand(Commands.cancelEpic, { runId: run.runId }).catch(() => undefined);
        }
        await stopSession(session).catch(() => undefined);
      }
      if (process.env.FLOWD_WIRE_KEEP === "1") process.stderr.write(`wire: kept ${tmp}\n`);
      else fs.rmSync(tmp, { recursive: true, force: true });
    });

    test("initialize advertises the flow.* commands", () => {
      const commands = session.initializeResult.capabilities.executeCommandProvider?.commands ?? [];
      for (const c of Object.values(Commands)) assert.ok(commands.includes(c), `${c} not advertised: ${commands.join(", ")}`);
    });

    test("flow.validatePlan: the sample plan is valid, a broken one lists its violations", async () => {
      const ok = await session.server.executeCommand<ValidateResult>(Commands.validatePlan, { plan });
      assert.deepEqual(ok, { violations: [] });
      const broken = path.join(repo, "broken.epic.json");
      fs.writeFileSync(broken, JSON.stringify({ epicId: "x", epic: "x", stories: [{ id: "Bad Id", title: "t", owned: [] }] }));
      const bad = await session.server.executeCommand<ValidateResult>(Commands.validatePlan, { plan: "broken.epic.json" });
      assert.ok(bad.violations.length >= 2, JSON.stringify(bad));
      fs.rmSync(broken);
    });

    test("a plan outside the workspace is taken, as flowd run takes it (Browse… sends its absolute path)", async () => {
      const elsewhere = path.join(tmp, "plans-elsewhere");
      fs.mkdirSync(elsewhere);
      const outside = path.join(elsewhere, "far.epic.json");
      fs.writeFileSync(outside, JSON.stringify({ ...PLAN, epicId: "far" }));
      const result = await session.server.executeCommand<ValidateResult>(Commands.validatePlan, { plan: outside });
      assert.deepEqual(result, { violations: [] });
    });

    test("flow.launchEpic runs the epic; the lanes tree and the status bar follow it to the end", async () => {
      const launched = await session.server.executeCommand<LaunchResult>(Commands.launchEpic, { plan, concurrency: 2 });
      assert.equal(launched.epicId, EPIC);
      assert.equal(launched.epicBranch, `epic/${EPIC}`);
      const { runId } = launched;

      await session.until((m) => {
        const run = m.run(runId);
        return run !== undefined && !isRunActive(run.status);
      });
      const run = session.model.run(runId);
      assert.ok(run);
      assert.equal(run.status, "done", `run ended ${run.status}; server stderr:\n${session.stderr.join("")}`);
      assert.deepEqual([run.done, run.failed, run.skipped, run.total], [3, 0, 0, 3]);

      const methods = new Set(session.notes.map((n) => n.method));
      for (const m of ["flow/run", "flow/lane", "flow/task", "flow/clone", "flow/cost"]) assert.ok(methods.has(m), `no ${m} notification`);

      const [root] = buildTree(session.model);
      assert.equal(root.label, EPIC);
      assert.equal(root.icon.id, "pass");
      const lanes = root.children.filter((c) => c.kind === "lane");
      assert.deepEqual(lanes.map((l) => l.label).sort(), ["api — Login API", "docs — Document login", "ui — Login page"]);
      for (const lane of lanes) {
        assert.equal(lane.icon.id, "pass-filled", `${lane.label}: ${lane.description}`);
        const taskNodes = lane.children.filter((c) => c.kind === "task");
        assert.ok(taskNodes.length >= 1, `${lane.label} shows no task`);
        for (const t of taskNodes) assert.equal(t.icon.id, "check", `${lane.label} ${t.label}: ${t.description}`);
        const clones = lane.children.filter((c) => c.kind === "clone");
        assert.ok(clones.length >= 1, `${lane.label} shows no clone`);
        for (const c of clones) {
          assert.match(c.label, /^demo#[123]$/);
          assert.match(c.description, /released/);
        }
      }
      const api = node(lanes, "api — Login API");
      assert.deepEqual(api.children.filter((c) => c.kind === "task").map((t) => t.label), ["1. Password hashing", "2. Login handler"]);
      assert.match(api.description, /^done · .*tok · \$0\.\d\d$/);

      const cost = run.cost;
      assert.ok(cost && cost.costUsd !== undefined && cost.costUsd > 0, JSON.stringify(cost));
      assert.equal(cost.estimatedTokens, 0);
      assert.equal(cost.unpricedTokens, 0);
      assert.equal(statusText(session.model), `$(check) ${EPIC} done · ${formatUsd(cost.costUsd)}`);

      // The work really landed on the epic branch, and the report names each story.
      assert.equal(git(repo, "show", `epic/${EPIC}:src/api/login.py`), "def login() -> bool:\n    return True\n");
      const apiLane = run.lanes.get("api");
      assert.ok(apiLane);
      assert.match(reportLine(run, apiLane), /^api: done/);
      // Where things are, as the server names them: the extension reads these and builds none.
      assert.equal(run.epicBranch, `epic/${EPIC}`);
      assert.equal(run.reportJson, path.join(repo, ".flow", "epics", EPIC, "report.json"));
      assert.equal(apiLane.branch, `story/${EPIC}/api`);
      assert.equal(apiLane.worktree, path.join(path.dirname(repo), `${path.basename(repo)}.flowd`, EPIC, "api"));
      assert.equal(apiLane.findings, path.join(repo, ".flow", "epics", EPIC, "stories", "api.findings.md"));

      // A fresh flow/status agrees with what the notifications built.
      const status = await session.server.request<StatusResult>(Requests.status, {});
      const listed = status.runs.find((r) => r.runId === runId);
      assert.ok(listed, JSON.stringify(status));
      assert.equal(listed.status, "done");
      const fresh = new LanesModel();
      fresh.applyStatus(status);
      assert.equal(statusText(fresh), statusText(session.model));

      const report = await session.server.request<{ schemaVersion: number; measured: { costUsd: number | null } }>(Requests.costReport, { runId, format: "json" });
      assert.equal(report.schemaVersion, 1);
      assert.ok(report.measured.costUsd !== null && Math.abs(report.measured.costUsd - cost.costUsd) < 1e-6, JSON.stringify(report.measured));
      const markdown = await session.server.request<{ text: string }>(Requests.costReport, { runId, format: "markdown" });
      assert.match(markdown.text, /^#/m);
      // The preview shows `[prices.<model>]` as written (the preview would drop a bare `<model>`).
      assert.ok(markdown.text.includes("[prices.<model>]"), markdown.text);
      assert.ok(escapeAngleBrackets(markdown.text).includes("[prices.&lt;model>]"));

      // The window saw the run go and end: one notice, with the outcome and the epic's cost.
      assert.deepEqual(
        ended.map((r) => r.runId),
        [runId],
      );
      assert.equal(runEndedMessage(session.model, ended[0]), `flowd: epic ${EPIC} done (run ${runId}) · 3 stories · ${formatUsd(cost.costUsd)}`);
    });

    test("Show Diff Against Epic Branch on a merged lane shows what the story brought in", () => {
      const run = session.model.epics().find((e) => e.epicId === EPIC)?.latest;
      assert.ok(run);
      const apiLane = run.lanes.get("api");
      assert.ok(apiLane);
      const merged = mergeCommit(repo, run, apiLane);
      assert.ok(merged, "no merge commit of story/auth/api on epic/auth");
      const command = diffCommand(repo, run, apiLane, merged);
      assert.ok(command);
      const out = execFileSync(command[0], command.slice(1), { encoding: "utf8" });
      assert.match(out, /src\/api\/hashing\.py/);
      assert.match(out, /^\+def login\(\) -> bool:$/m);
      assert.doesNotMatch(out, /src\/ui\/page\.py/, "another story's change leaked into api's diff");
    });

    test("flow.cancelEpic stops a run (resumable), flow.resumeEpic finishes it", async () => {
      const slowPlan = path.join(repo, "slow.epic.json");
      fs.writeFileSync(slowPlan, JSON.stringify(SLOW_PLAN, null, 2));
      const launched = await session.server.executeCommand<LaunchResult>(Commands.launchEpic, { plan: "slow.epic.json" });
      // Cancel once the planner has spent (the coder is then on its slow task): the epic's cost must add up two runs.
      await session.until((m) => {
        const run = m.run(launched.runId);
        return run?.lanes.get("slow-story")?.status === "active" && (run.cost?.costUsd ?? 0) > 0;
      });
      const cancelled = await session.server.executeCommand<{ runId: string; outcome: string }>(Commands.cancelEpic, { runId: launched.runId });
      assert.equal(cancelled.runId, launched.runId);
      await session.until((m) => {
        const run = m.run(launched.runId);
        return run !== undefined && !isRunActive(run.status);
      });
      const stopped = session.model.run(launched.runId);
      assert.equal(stopped?.status, "cancelled");

      // The cancelled story keeps its worktree; a window opened on it is served from the main checkout.
      const slowLane = stopped.lanes.get("slow-story");
      assert.ok(slowLane);
      const worktree = findWorktree(slowLane);
      assert.ok(worktree && worktree !== repo, `no worktree for slow-story: ${worktree}`);
      assert.equal(mainCheckout(worktree), repo);
      assert.match(statusText(session.model), /^\$\(circle-slash\) slow cancelled · 0\/1 done/);

      // Resume through the command, as the user does from the cancelled run's node.
      stub.reset([repo]);
      stub.answers.quickPick.length = 0;
      const ctx = {
        model: session.model,
        log: stub.window.createOutputChannel("flowd") as never,
        server: () => session.server,
        flowdPath: () => FLOWD_BIN,
        refresh: async () => {
          const status = await session.server.request<StatusResult>(Requests.status, {});
          session.model.applyStatus(status);
          return status;
        },
      };
      const resumed = await resumeRun(ctx, { runId: launched.runId });
      assert.ok(resumed, JSON.stringify(stub.recorded.messages));
      assert.equal(resumed.epicId, "slow");
      assert.notEqual(resumed.runId, launched.runId);
      await session.until((m) => m.run(resumed.runId)?.status === "done");
      assert.equal(git(repo, "show", "epic/slow:src/slow/a.py"), "A = 1\n");
      await ctx.refresh();

      // One epic in the tree, its latest run done, the cancelled run under History.
      const tops = buildTree(session.model).filter((n) => n.label === "slow");
      assert.equal(tops.length, 1);
      const [top] = tops;
      assert.equal(top.icon.id, "pass");
      assert.equal(top.runId, resumed.runId);
      const history = top.children.find((c) => c.kind === "history");
      assert.ok(history, top.children.map((c) => c.label).join(", "));
      assert.deepEqual(
        history.children.map((c) => [c.label, c.contextValue]),
        [[launched.runId, "run.past"]],
      );

      // Resuming the old run again starts no third run.
      assert.deepEqual(resumeTarget(session.model, launched.runId), { problem: `flowd: epic slow is done (run ${resumed.runId} resumed run ${launched.runId}).` });
      stub.reset([repo]);
      assert.equal(await resumeRun(ctx, { runId: launched.runId }), undefined);
      const status = await session.server.request<StatusResult>(Requests.status, {});
      assert.equal(status.runs.filter((r) => r.epicId === "slow").length, 2);

      // The epic's cost is both runs' (each run's own from the cost report), in the tree and the status bar.
      const reports = await Promise.all(
        [launched.runId, resumed.runId].map((id) => session.server.request<{ measured: { costUsd: number | null } }>(Requests.costReport, { runId: id, format: "json" })),
      );
      const both = reports.reduce((n, r) => n + (r.measured.costUsd ?? 0), 0);
      assert.ok((reports[0].measured.costUsd ?? 0) > 0, "the cancelled run spent nothing; the test cannot tell the sum from the last run");
      const epic = session.model.epics().find((e) => e.epicId === "slow");
      assert.ok(epic);
      const summed = epicCost(epic);
      assert.ok(summed?.costUsd !== undefined && Math.abs(summed.costUsd - both) < 1e-6, `${JSON.stringify(summed)} vs ${both}`);
      assert.ok(top.description.endsWith(costPhrase(summed)), top.description);
      assert.equal(statusText(session.model), `$(check) slow done · ${costPhrase(summed)}`);
    });

    test("Flow: Draft Epic Plan runs flowd plan new (the planner role) and opens the draft", async () => {
      stub.reset([repo]);
      stub.answers.inputBox.push(`Add invoices ${DRAFT_MARK}`, "billing.epic.json");
      // draftPlan runs flowd with the extension host's environment: isolate it as for the server.
      const vars = isolatedVars(home);
      const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
      Object.assign(process.env, vars);
      const log = stub.window.createOutputChannel("flowd");
      try {
        const uri = await draftPlan({
          model: session.model,
          log: log as never,
          server: () => session.server,
          flowdPath: () => FLOWD_BIN,
          refresh: () => Promise.resolve(undefined),
        });
        const errors = stub.recorded.messages.filter((m) => m.kind === "error").map((m) => m.message);
        assert.deepEqual(errors, [], log.lines.join(""));
        assert.equal(uri?.fsPath, path.join(repo, "billing.epic.json"));
      } finally {
        for (const [key, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[key];
          else process.env[key] = value;
        }
      }
      assert.equal(stub.recorded.inputBoxes[1].value, "add-invoices-zebra-draft.epic.json");
      const drafted = JSON.parse(fs.readFileSync(path.join(repo, "billing.epic.json"), "utf8")) as { epicId: string; stories: { id: string }[] };
      assert.match(drafted.epicId, /^[a-z0-9][a-z0-9-]*$/); // flowd names the epic itself
      assert.deepEqual(drafted.stories.map((s) => s.id), ["invoices"]);
      assert.equal(stub.recorded.shownDocuments[0]?.fsPath, path.join(repo, "billing.epic.json"));
    });

    test("shutdown then exit ends the server with code 0", async () => {
      const code = await stopSession(session);
      session = undefined as unknown as Session;
      assert.equal(code, 0);
    });
  });
  describe("wire: flowd serve --tcp with the user's token", { timeout: 120_000 }, () => {
    let tmp: string;
    let server: ChildProcess | undefined;

    before(() => {
      tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-wire-tcp-")));
    });

    after(async () => {
      if (server && server.exitCode === null) {
        const gone = new Promise((resolve) => server?.once("exit", resolve));
        server.kill("SIGTERM");
        await gone;
      }
      fs.rmSync(tmp, { recursive: true, force: true });
    });

    /** The port of the server, from the token file it writes when it listens. */
    async function tokenPort(runtime: string): Promise<number> {
      const dir = path.join(runtime, "flowd");
      for (let i = 0; i < 600; i++) {
        const file = fs.existsSync(dir) ? fs.readdirSync(dir).find((f) => /^serve-\d+\.json$/.test(f)) : undefined;
        if (file) return Number(/\d+/.exec(file)?.[0]);
        if (server?.exitCode !== null) throw new Error(`flowd serve --tcp exited (${server?.exitCode}) before writing its token`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error(`flowd serve --tcp wrote no token file in ${dir}`);
    }

    function initialize(conn: MessageConnection, repo: string, token?: string): Promise<{ capabilities: { executeCommandProvider?: { commands: string[] } } }> {
      const rootUri = `file://${repo}`;
      return conn.sendRequest("initialize", {
        processId: process.pid,
        rootUri,
        workspaceFolders: [{ uri: rootUri, name: "app" }],
        capabilities: {},
        ...(token === undefined ? {} : { initializationOptions: { token } }),
      });
    }

    test("the extension's TCP path reads the token file and is served; a client without it is refused", async () => {
      const home = path.join(tmp, "home");
      const runtime = path.join(tmp, "runtime");
      fs.mkdirSync(home);
      fs.mkdirSync(runtime, { mode: 0o700 });
      const { repo } = makeRepo(tmp);
      const env = { ...isolatedEnv(home), XDG_RUNTIME_DIR: runtime };
      server = spawn(FLOWD_BIN, ["serve", "--tcp", "--port", "0"], { cwd: repo, env, stdio: ["ignore", "ignore", "pipe"] });
      server.stderr?.resume();
      const port = await tokenPort(runtime);

      // A stranger: no token, refused with -32600.
      const stranger = await connectLoopback(port);
      const bad = createMessageConnection(new StreamMessageReader(stranger), new StreamMessageWriter(stranger));
      bad.listen();
      await assert.rejects(initialize(bad, repo), (err: unknown) => err instanceof ResponseError && err.code === -32600);
      bad.dispose();
      stranger.destroy();

      // The extension's way: the token from the file (readToken), sent as initializationOptions.token.
      const token = readToken(port, env);
      assert.ok("token" in token, JSON.stringify(token));
      const socket = await connectLoopback(port);
      const conn = createMessageConnection(new StreamMessageReader(socket), new StreamMessageWriter(socket));
      conn.onRequest("client/registerCapability", () => null);
      conn.onRequest("workspace/configuration", (p: { items: unknown[] }) => p.items.map(() => null));
      conn.listen();
      const result = await initialize(conn, repo, token.token);
      assert.ok(result.capabilities.executeCommandProvider?.commands.includes(Commands.launchEpic));
      await conn.sendNotification("initialized", {});
      const status = await conn.sendRequest<StatusResult>(Requests.status, {});
      assert.deepEqual(status, { runs: [] });
      await conn.sendRequest("shutdown");
      await conn.sendNotification("exit");
      conn.dispose();
      socket.destroy();
    });
  });
}
