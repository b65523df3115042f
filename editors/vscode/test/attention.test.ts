// Pause and ask, on the wire: the real `flowd serve` (FLOWD_BIN) launches a run with the editor's
// default `pauseOn`; the scripted coder answers BLOCKED_ON; the extension's own code counts the
// `flow/attention`, shows it with its buttons, takes free text from the input box and sends
// `flow.answer`; the story goes on with the answer in its prompt and the wait is cleared
// (docs/answers.md). Real git, a real detached `flowd run`; the `vscode` module is the test stub.

import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { createMessageConnection, MessageConnection, StreamMessageReader, StreamMessageWriter } from "vscode-jsonrpc/node";
import { ANSWER_ITEM, AttentionTracker, DEFAULT_PAUSE_ON } from "../src/attention";
import { CommandContext, showAttention } from "../src/commands";
import { LanesModel } from "../src/lanesModel";
import { AttentionParams, Commands, FlowServer, LaunchResult } from "../src/protocol";
import * as stub from "./stubs/vscode";

const FLOWD_BIN = process.env.FLOWD_BIN ?? "";
// Without FLOWD_BIN wire.test.ts fails saying so; FLOWD_WIRE=0 opts out of every wire test.
const WIRE = process.env.FLOWD_WIRE !== "0" && FLOWD_BIN !== "";

const PLAN = {
  epicId: "greet",
  epic: "Greet people",
  stories: [{ id: "hello", title: "Hello", description: "Write hello.txt.", owned: ["hello.txt"] }],
};
const SCRIPT = {
  model: "scripted",
  rules: [
    { when: { role: "coder", story: "hello" }, times: 1, reply: "Stuck.\nBLOCKED_ON: which greeting the product wants" },
    { when: { role: "coder", story: "hello", prompt: "say HOWDY" }, writes: { "hello.txt": "howdy\n" }, reply: "Done." },
  ],
};
const ROSTER = '[[executors]]\nid = "demo"\nkind = "script"\nscript = "demo.script.json"\nroles = ["planner", "coder", "reviewer", "judge"]\nslots = 2\n';

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@flowd.invalid", ...args], { cwd, encoding: "utf8" });
}

function makeRepo(base: string): string {
  const repo = path.join(base, "app");
  fs.mkdirSync(repo, { recursive: true });
  fs.writeFileSync(path.join(repo, "README.md"), "# app\n");
  fs.writeFileSync(path.join(repo, "greet.epic.json"), JSON.stringify(PLAN));
  git(repo, "init", "-q", "-b", "main");
  git(repo, "add", "-A");
  git(repo, "commit", "-q", "-m", "initial");
  fs.mkdirSync(path.join(repo, ".flow"));
  fs.writeFileSync(path.join(repo, ".flow", "roster.toml"), ROSTER);
  fs.writeFileSync(path.join(repo, ".flow", "demo.script.json"), JSON.stringify(SCRIPT));
  fs.writeFileSync(path.join(repo, ".flow", "config.toml"), "judgeRounds = 0\nmaxReviewRounds = 0\n");
  return repo;
}

if (WIRE) describe("wire: pause and ask from VS Code", { timeout: 180_000 }, () => {
  let tmp: string;
  let proc: ChildProcess;
  let conn: MessageConnection;
  const notes: { method: string; params: Record<string, unknown> }[] = [];
  const waiters: (() => void)[] = [];
  let stopDaemon = (): void => undefined;

  /** Resolves once `ready()` holds, re-checked after every notification. */
  function until(ready: () => boolean, what: string): Promise<void> {
    if (ready()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const guard = setTimeout(() => reject(new Error(`never got ${what}: ${JSON.stringify(notes.slice(-8))}`)), 150_000);
      const check = (): void => {
        if (!ready()) return;
        clearTimeout(guard);
        waiters.splice(waiters.indexOf(check), 1);
        resolve();
      };
      waiters.push(check);
    });
  }

  before(async () => {
    tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "flowd-attention-")));
    const repo = makeRepo(tmp);
    const home = path.join(tmp, "home");
    fs.mkdirSync(home);
    const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, ".config"), FLOWD_SCRIPT_STATE: path.join(home, "state") };
    proc = spawn(FLOWD_BIN, ["serve"], { cwd: repo, env, stdio: ["pipe", "pipe", "pipe"] });
    proc.stderr?.resume();
    // The repository's daemon outlives its sessions by design: the test stops what it started.
    stopDaemon = (): void => {
      try {
        execFileSync(FLOWD_BIN, ["daemon", "stop"], { cwd: repo, env, stdio: "ignore", timeout: 30_000 });
      } catch {
        // none ran, or it is gone already
      }
    };
    conn = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
    conn.onNotification((method: string, params: unknown) => {
      notes.push({ method, params: params as Record<string, unknown> });
      for (const w of [...waiters]) w();
    });
    conn.onRequest(() => null);
    conn.listen();
    const rootUri = `file://${repo}`;
    await conn.sendRequest("initialize", { processId: process.pid, rootUri, workspaceFolders: [{ uri: rootUri, name: "app" }], capabilities: {} });
    await conn.sendNotification("initialized", {});
  });

  after(async () => {
    const runs = notes.filter((n) => n.method === "flow/run").map((n) => n.params.runId as string);
    for (const runId of new Set(runs)) await conn.sendRequest("workspace/executeCommand", { command: Commands.cancelEpic, arguments: [{ runId }] }).catch(() => undefined);
    const exited = new Promise((resolve) => proc.once("exit", resolve));
    await conn.sendRequest("shutdown").catch(() => undefined);
    await conn.sendNotification("exit").catch(() => undefined);
    const guard = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(guard);
    conn.dispose();
    stopDaemon();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  test("a blocked story is counted and asked; the typed answer goes on and clears the wait", async () => {
    const server: FlowServer = {
      executeCommand: <T>(command: string, arg: object) => conn.sendRequest<T>("workspace/executeCommand", { command, arguments: [arg] }),
      request: <T>(method: string, params: object) => conn.sendRequest<T>(method, params),
    };
    const launched = await server.executeCommand<LaunchResult>(Commands.launchEpic, { plan: "greet.epic.json", pauseOn: DEFAULT_PAUSE_ON });
    const attention = (reason: string): AttentionParams | undefined =>
      notes.find((n) => n.method === "flow/attention" && n.params.runId === launched.runId && n.params.reason === reason)?.params as AttentionParams | undefined;
    await until(() => attention("blocked") !== undefined, "the blocked attention");

    const tracker = new AttentionTracker();
    const blocked = attention("blocked")!;
    tracker.apply(blocked);
    assert.equal(tracker.count, 1);
    assert.equal(blocked.lane, "hello");

    stub.reset([tmp]);
    stub.answers.message.push(ANSWER_ITEM);
    stub.answers.inputBox.push("say HOWDY to everyone");
    const ctx: CommandContext = {
      model: new LanesModel(),
      log: stub.window.createOutputChannel("flowd") as never,
      server: () => server,
      flowdPath: () => undefined,
      refresh: () => Promise.resolve(undefined),
    };
    assert.equal(await showAttention(ctx, blocked), "say HOWDY to everyone");
    assert.deepEqual(stub.recorded.messages[0].items, ["stop", ANSWER_ITEM, "Show Lanes"]);

    await until(() => attention("cleared") !== undefined, "cleared");
    tracker.apply(attention("cleared")!);
    assert.equal(tracker.count, 0);
    const runStatus = (): unknown => notes.filter((n) => n.method === "flow/run" && n.params.runId === launched.runId).at(-1)?.params.status;
    await until(() => runStatus() === "done", "the run done");
  });
});
